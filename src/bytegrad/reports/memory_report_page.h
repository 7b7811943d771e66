// The memory report's page (memory_report.h): memory_report_page.html, compiled into the library at build
// time, with two holes: @@TITLE@@ (the escaped title) and @@DATA@@ (the JSON memory_report_json writes).
// Plain HTML, CSS, SVG and JavaScript: no library, nothing fetched (the Content-Security-Policy forbids it,
// so a stray fetch would show as an error). The script records its own errors into #errors and the
// <html data-errors> attribute, and marks <body data-rendered="yes"> when every part is drawn: what the
// headless-Chromium test (tests/html) reads.
#pragma once

#include <string>

namespace bytegrad {

const std::string& memory_report_page_template();

}  // namespace bytegrad
