// Holding a program's marks to PyTorch's golden (programs/checks.h runs it under the goldens' conditions).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "programs/checks.h"

namespace bytegrad::testing {

// The recorded marks are the golden's labels in order, and every named figure equals PyTorch's.
inline void check_marks(const std::vector<programs::GoldenStep>& got, const std::vector<programs::GoldenStep>& want,
                        const std::vector<std::string>& skip_fields = {}) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(want[i].label);
    REQUIRE(got[i].label == want[i].label);
    for (const programs::StepField& f : programs::golden_step_fields()) {
      if (std::find(skip_fields.begin(), skip_fields.end(), f.name) != skip_fields.end()) continue;
      const std::string field = f.name;
      CAPTURE(field);
      CHECK(got[i].*f.member == want[i].*f.member);
    }
  }
}

inline void check_against_golden(const std::string& name, Device device, void (*program)(programs::ScenarioRecorder&),
                                 programs::Workspaces workspaces = programs::Workspaces::none) {
  CAPTURE(name);
  CAPTURE(device.str());
  check_marks(programs::run_scenario(name, device, program, workspaces), programs::golden(name, workspaces));
}

}  // namespace bytegrad::testing
