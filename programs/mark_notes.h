// Why each mark of the seed scenarios looks as it does, in a sentence: the lesson the seed documents
// teach at that point. The walkthrough prints it under the figures (the mechanical part, which ops
// allocated or freed, comes from the allocator's history: memory_story.h).
#pragma once

#include <string>

namespace bytegrad::programs {

// "" when there is no note for this scenario and mark.
std::string mark_note(const std::string& scenario, const std::string& label);

}  // namespace bytegrad::programs
