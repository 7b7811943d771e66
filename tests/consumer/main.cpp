// A consumer's program: one header each for the library and the test helpers, one figure checked by
// arithmetic, and the HTML report's page, which the library carries inside itself. Exits 1 when either is
// wrong.
#include <cstdio>
#include <string>

#include <bytegrad/bytegrad.h>
#include <bytegrad/testing.h>

int main() {
  using namespace bytegrad;
  testing::FreshDevice fresh(kMeta);
  testing::MemoryProbe probe(kMeta);
  Tensor x = zeros({1024, 1024}, device(kMeta));  // 1024 * 1024 * 4 = 4194304 B
  const auto check = probe.allocated_delta_is(4194304);
  std::printf("%s\n", check.message.c_str());

  // An empty report is the whole page (memory_report_page.html, embedded at build time) with its two holes
  // filled: it begins with the doctype, ends with </html>, and keeps no @@TITLE@@ or @@DATA@@.
  const std::string page = memory_report_html(MemorySnapshot{}, {}, PeakRecord{}, "meta");
  const bool page_whole =
      page.rfind("<!DOCTYPE html>", 0) == 0 && page.ends_with("</html>\n") && page.find("@@") == std::string::npos;
  std::printf("report page: %zu bytes%s\n", page.size(), page_whole ? "" : ", not the whole page");
  return check && page_whole ? 0 : 1;
}
