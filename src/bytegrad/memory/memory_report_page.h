// The memory report's page (memory_report.h): HTML with its styles and script inline, with two holes:
// @@TITLE@@ (the escaped title) and @@DATA@@ (the JSON memory_report_json writes).
#pragma once

#include <string>

namespace bytegrad {

const std::string& memory_report_page_template();

}  // namespace bytegrad
