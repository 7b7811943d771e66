#include "bytegrad/reports/memory_report_page.h"

#include <string_view>

namespace bytegrad {

namespace embedded {
// memory_report_page.html's bytes, compiled in at build time (reports/CMakeLists.txt).
std::string_view memory_report_page_html();
}  // namespace embedded

const std::string& memory_report_page_template() {
  static const std::string page(embedded::memory_report_page_html());
  return page;
}

}  // namespace bytegrad
