// The HTML memory report in a real browser: bytegrad-walkthrough --html writes seed001_mlp_estimate's report on
// meta; headless Chromium (Debian's `chromium`) loads it from file:// with the network unreachable, and
//  - no script error and no console message (an error, or a fetch the page's Content-Security-Policy
//    refused) appears, the page says it rendered (<body data-rendered="yes">, set by its script last);
//  - the marks table holds every mark of the golden file (shared/golden/scenarios/seed001_mlp_estimate.json,
//    read here) with each of its eight figures as the exact integer, byte figures with their human unit
//    (bytegrad's human_bytes) beside them; the legend names the ten categories;
//  - opened at each mark (report.html#mark=K), the allocator state the page replays in JavaScript has the
//    golden's reserved, allocated, segments and blocks;
//  - a screenshot is kept: build/tests/html/seed001_mlp_estimate.png;
//  - that one-stream page shows nothing of streams; a two-stream program's page (written here, on sim) labels
//    and groups the segments by stream with each stream's reserved and allocated bytes, and draws the block
//    freed while the side stream still has queued work (record_stream) as pending, with its legend entry.
// Without a chromium on PATH (or BYTEGRAD_CHROMIUM), it exits 77: ctest reports it skipped, saying why.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bytegrad/memory/memory_category.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/reports/memory_report.h"
#include "bytegrad/reports/memory_story.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/tensor.h"
#include "bytegrad/testing/fresh_device.h"
#include "bytegrad/testing/stream_work.h"
#include "programs/mark_notes.h"
#include "programs/scenario.h"

using namespace bytegrad;
using namespace bytegrad::programs;
namespace fs = std::filesystem;

namespace {

const std::string kScenario = "seed001_mlp_estimate";
std::string chromium;  // the browser found by main
const fs::path out_dir = BYTEGRAD_HTML_TEST_DIR;

std::string find_chromium() {
  if (const char* chosen = std::getenv("BYTEGRAD_CHROMIUM"); chosen && *chosen) return chosen;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':'))
    for (const char* name : {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"})
      if (!dir.empty() && access((fs::path(dir) / name).c_str(), X_OK) == 0) return (fs::path(dir) / name).string();
  return "";
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct Browser {
  std::string dom;
  std::string log;
};

// Headless Chromium, offline (every host name resolves to nothing), with a profile of its own.
Browser browse(const std::string& url, const std::string& extra, const std::string& name) {
  const fs::path profile = out_dir / ("profile-" + name);
  fs::remove_all(profile);
  const fs::path dom = out_dir / (name + ".dom.html"), log = out_dir / (name + ".log");
  const std::string command =
      quote(chromium) + " --headless --no-sandbox --disable-gpu --no-first-run --no-default-browser-check" +
      " --disable-extensions --disable-background-networking --disable-component-update --disable-sync" +
      " --disable-dev-shm-usage" +
      " --host-resolver-rules='MAP * ~NOTFOUND' --enable-logging=stderr --v=0 --user-data-dir=" +
      quote(profile.string()) + " " + extra + " " + quote(url) + " >" + quote(dom.string()) + " 2>" +
      quote(log.string());
  const int status = run(command);
  Browser b{read(dom), read(log)};
  fs::remove_all(profile);
  INFO("chromium exited " << status << "; its log:\n" << b.log);
  CHECK(status == 0);
  return b;
}

// Console messages (script errors, refused fetches, console.* calls) in Chromium's log.
std::vector<std::string> console_lines(const std::string& log) {
  std::vector<std::string> found;
  std::stringstream lines(log);
  std::string line;
  while (std::getline(lines, line))
    if (line.find("CONSOLE") != std::string::npos || line.find("Uncaught") != std::string::npos ||
        line.find("Refused to") != std::string::npos)
      found.push_back(line);
  return found;
}

// The text of an element's children, tags removed.
std::string strip_tags(const std::string& html) {
  std::string text;
  bool in_tag = false;
  for (char c : html) {
    if (c == '<') in_tag = true;
    else if (c == '>') in_tag = false;
    else if (!in_tag) text += c;
  }
  return text;
}

// The markup from the element whose opening tag holds `marker` to the matching close of `tag`
// (no nesting of the same tag inside: true of the rows, cells and lists read here).
std::string element(const std::string& html, const std::string& marker, const std::string& tag, size_t from = 0) {
  const size_t at = html.find(marker, from);
  if (at == std::string::npos) return "";
  const size_t open = html.rfind("<" + tag, at);
  const size_t close = html.find("</" + tag + ">", at);
  if (open == std::string::npos || close == std::string::npos) return "";
  return html.substr(open, close + tag.size() + 3 - open);
}

// "7.11 MiB" from human_bytes's "7.11 MiB (7455232 B)"; "512 B" as it is.
std::string human_unit(int64_t bytes) {
  const std::string h = human_bytes(bytes);
  const size_t paren = h.find(" (");
  return paren == std::string::npos ? h : h.substr(0, paren);
}

struct Report {
  fs::path page;
  std::vector<GoldenStep> golden;
};

const Report& report() {
  static const Report r = [] {
    Report made;
    const fs::path dir = out_dir / "walkthrough";
    fs::remove_all(dir);
    const int status = run(quote(BYTEGRAD_WALKTHROUGH) + " " + kScenario + " --device meta --html " +
                           quote(dir.string()) + " >" + quote((out_dir / "walkthrough.txt").string()) + " 2>&1");
    INFO(read(out_dir / "walkthrough.txt"));
    REQUIRE(status == 0);  // every mark equal to PyTorch's
    made.page = dir / (kScenario + ".html");
    REQUIRE(fs::exists(made.page));
    REQUIRE(fs::exists(dir / "index.html"));
    made.golden = read_golden_scenario(golden_scenario_path(kScenario));
    REQUIRE(!made.golden.empty());
    return made;
  }();
  return r;
}

std::string file_url(const fs::path& path) { return "file://" + fs::absolute(path).string(); }

}  // namespace

TEST_CASE("html: the report is one self-contained file, and the index links it") {
  const Report& r = report();
  const std::string page = read(r.page);
  // Nothing to fetch: no src= or href= attribute, no url(...) in styles, no http(s) address but the SVG
  // namespace's name (an identifier, never fetched).
  CHECK(page.find(" src=") == std::string::npos);
  CHECK(page.find(" href=") == std::string::npos);
  CHECK(page.find("url(") == std::string::npos);
  CHECK(page.find("https://") == std::string::npos);
  const std::string svg_namespace = "http://www.w3.org/2000/svg";
  for (size_t at = page.find("http://"); at != std::string::npos; at = page.find("http://", at + 1))
    CHECK(page.compare(at, svg_namespace.size(), svg_namespace) == 0);
  CHECK(read(r.page.parent_path() / "index.html").find("href=\"" + kScenario + ".html\"") != std::string::npos);
}

TEST_CASE("html: Chromium renders the report offline without errors; the marks' figures and the categories") {
  const Report& r = report();
  const Browser b = browse(file_url(r.page), "--dump-dom", "report");
  INFO("chromium log:\n" << b.log);
  CHECK(console_lines(b.log).empty());
  CHECK(b.dom.find("data-rendered=\"yes\"") != std::string::npos);
  CHECK(b.dom.find("data-errors=") == std::string::npos);

  // The legend: the categories, in precedence order, then the reserved line.
  std::string names;
  for (MemoryCategory c : kMemoryCategories) names += std::string(category_name(c));
  CHECK(strip_tags(element(b.dom, "id=\"legend\"", "ul")) == names + "reserved");

  // The marks table: row K is golden step K, each figure its exact integer, with its human unit for bytes.
  const size_t table = b.dom.find("id=\"marks-table\"");
  REQUIRE(table != std::string::npos);
  for (size_t k = 0; k < r.golden.size(); ++k) {
    const GoldenStep& want = r.golden[k];
    CAPTURE(want.label);
    const std::string row = element(b.dom, "data-mark=\"" + std::to_string(k) + "\"", "tr", table);
    REQUIRE(!row.empty());
    CHECK(strip_tags(element(row, "mark-label", "span")) == want.label);
    for (const StepField& f : golden_step_fields()) {
      CAPTURE(f.name);
      const std::string cell = element(row, std::string("data-figure=\"") + f.name + "\"", "td");
      REQUIRE(!cell.empty());
      const int64_t value = want.*f.member;
      const bool is_bytes = std::string(f.name) != "segments" && std::string(f.name) != "blocks";
      // The integer first, then (bytes only) the human unit in its own <span class="h">.
      const size_t unit = cell.find("<span class=\"h\">");
      CHECK(strip_tags(cell.substr(0, unit)) == std::to_string(value));
      CHECK(strip_tags(unit == std::string::npos ? "" : cell.substr(unit)) == (is_bytes ? human_unit(value) : ""));
    }
  }
  // The categories by mark: every row sums to the mark's allocated bytes.
  const size_t by_category = b.dom.find("id=\"marks-category-table\"");
  REQUIRE(by_category != std::string::npos);
  for (size_t k = 0; k < r.golden.size(); ++k) {
    const std::string row = element(b.dom, "data-mark=\"" + std::to_string(k) + "\"", "tr", by_category);
    const std::string cell = element(row, "data-figure=\"sum\"", "td");
    CHECK(strip_tags(cell.substr(0, cell.find("<span"))) == std::to_string(r.golden[k].allocated));
  }
}

TEST_CASE("html: at each mark, the state the page replays has the golden's reserved, allocated, segments, blocks") {
  const Report& r = report();
  for (size_t k = 0; k < r.golden.size(); ++k) {
    const GoldenStep& want = r.golden[k];
    CAPTURE(want.label);
    const Browser b = browse(file_url(r.page) + "#mark=" + std::to_string(k), "--dump-dom", "mark" + std::to_string(k));
    CHECK(console_lines(b.log).empty());
    REQUIRE(b.dom.find("data-rendered=\"yes\"") != std::string::npos);
    auto shown = [&](const std::string& id) { return strip_tags(element(b.dom, "id=\"" + id + "\"", "span")); };
    CHECK(shown("state-reserved") == std::to_string(want.reserved));
    CHECK(shown("state-allocated") == std::to_string(want.allocated));
    CHECK(shown("state-segments") == std::to_string(want.segments));
    CHECK(shown("state-blocks") == std::to_string(want.blocks));
    CHECK(strip_tags(element(b.dom, "id=\"state-event\"", "div")).find("mark " + want.label) != std::string::npos);
  }
}

namespace {

// An attribute's value in the first element whose markup holds `marker`.
std::string attribute(const std::string& dom, const std::string& marker, const std::string& name) {
  const size_t at = dom.find(marker);
  if (at == std::string::npos) return "";
  const size_t open = dom.rfind('<', at), end = dom.find('>', at);
  const std::string tag = dom.substr(open, end - open);
  const size_t value = tag.find(" " + name + "=\"");
  if (value == std::string::npos) return "";
  const size_t from = value + name.size() + 3;
  return tag.substr(from, tag.find('"', from) - from);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("html: each mark shows the story's sentences: by op, by category, and why") {
  const Report& r = report();
  const Browser b = browse(file_url(r.page), "--dump-dom", "story");
  REQUIRE(b.dom.find("data-rendered=\"yes\"") != std::string::npos);
  const size_t table = b.dom.find("id=\"marks-table\"");
  REQUIRE(table != std::string::npos);
  size_t notes = 0;
  for (size_t k = 0; k < r.golden.size(); ++k) {
    const GoldenStep& want = r.golden[k];
    CAPTURE(want.label);
    const std::string row = strip_tags(element(b.dom, "data-mark=\"" + std::to_string(k) + "\"", "tr", table));
    const std::string note = mark_note(kScenario, want.label);
    if (!note.empty()) {
      ++notes;
      CHECK(has(row, note));
    }
  }
  CHECK(notes >= 5);  // seed001's marks are explained (programs/mark_notes.cpp)
  // The first mark ("model"): the parameters appeared, 7455232 B (tests/ledger's arithmetic).
  const std::string first = strip_tags(element(b.dom, "data-mark=\"0\"", "tr", table));
  CHECK(has(first, "by category: +7.11 MiB (7455232 B) parameter"));

  // Opened at a mark, the allocator's panel tells that mark's story.
  const Browser at_model = browse(file_url(r.page) + "#mark=0", "--dump-dom", "story-mark0");
  // Its lines are divs of their own inside #state-story, which ends before the next table.
  const size_t story_at = at_model.dom.find("id=\"state-story\"");
  REQUIRE(story_at != std::string::npos);
  const std::string story = strip_tags(at_model.dom.substr(story_at, at_model.dom.find("<table", story_at) - story_at));
  CHECK(has(story, "by category: +7.11 MiB (7455232 B) parameter"));
  CHECK(has(story, mark_note(kScenario, r.golden[0].label)));
}

TEST_CASE("html: hiding categories (#hide=, as a legend click does) and zooming (#zoom=, as a drag does)") {
  const Report& r = report();
  const Browser whole = browse(file_url(r.page), "--dump-dom", "view-whole");
  REQUIRE(whole.dom.find("data-rendered=\"yes\"") != std::string::npos);
  const double whole_max = std::stod(attribute(whole.dom, "id=\"timeline\"", "data-max-y"));
  CHECK(has(whole.dom, "<polygon points="));
  CHECK(has(whole.dom, "id=\"reserved-line\""));
  CHECK(has(whole.dom, "id=\"zoom-reset\" disabled"));  // nothing to reset

  // `other` (the data, the logits) and the reserved line hidden: their shapes are gone, the legend says so,
  // and the axis fits what is left (below the whole view's, at least every mark's parameters and the rest).
  const Browser hidden = browse(file_url(r.page) + "#hide=other,reserved", "--dump-dom", "view-hidden");
  CHECK(console_lines(hidden.log).empty());
  REQUIRE(hidden.dom.find("data-rendered=\"yes\"") != std::string::npos);
  CHECK(!has(hidden.dom, "fill-opacity=\"0.9\" data-category=\"other\""));
  CHECK(has(hidden.dom, "fill-opacity=\"0.9\" data-category=\"parameter\""));
  CHECK(!has(hidden.dom, "id=\"reserved-line\""));
  CHECK(attribute(hidden.dom, "data-category=\"other\" role=", "data-hidden") == "yes");
  CHECK(attribute(hidden.dom, "data-legend=\"reserved\"", "data-hidden") == "yes");
  CHECK(attribute(hidden.dom, "data-category=\"parameter\" role=", "data-hidden") == "");
  const double hidden_max = std::stod(attribute(hidden.dom, "id=\"timeline\"", "data-max-y"));
  CHECK(hidden_max < whole_max);
  const size_t by_category = hidden.dom.find("id=\"marks-category-table\"");
  for (size_t k = 0; k < r.golden.size(); ++k) {
    const std::string row = element(hidden.dom, "data-mark=\"" + std::to_string(k) + "\"", "tr", by_category);
    const std::string other = element(row, "data-category=\"other\"", "td");
    const int64_t shown = r.golden[k].allocated - std::stoll(strip_tags(other.substr(0, other.find("<span"))));
    CHECK(hidden_max >= static_cast<double>(shown));
  }

  // A zoom into events 10..39: the axis starts at 10, the range is named, only marks inside are labelled,
  // and "all events" is offered.
  const Browser zoomed = browse(file_url(r.page) + "#zoom=10-40", "--dump-dom", "view-zoomed");
  CHECK(console_lines(zoomed.log).empty());
  REQUIRE(zoomed.dom.find("data-rendered=\"yes\"") != std::string::npos);
  CHECK(attribute(zoomed.dom, "id=\"timeline\"", "data-zoom") == "10-40");
  const std::string range = strip_tags(element(zoomed.dom, "id=\"timeline-range\"", "text"));
  CHECK(has(range, "allocator events 10\u201339 of "));
  CHECK(!has(zoomed.dom, "id=\"zoom-reset\" disabled"));
  const size_t table = zoomed.dom.find("id=\"marks-table\"");
  for (size_t k = 0; k < r.golden.size(); ++k) {
    const std::string row = element(zoomed.dom, "data-mark=\"" + std::to_string(k) + "\"", "tr", table);
    const int64_t event = std::stoll(attribute(row, "data-event=", "data-event"));
    CAPTURE(event);
    CHECK(has(zoomed.dom, "data-mark-label=\"" + std::to_string(k) + "\"") == (event >= 10 && event < 40));
  }
}

TEST_CASE("html: a click on a legend entry hides its category, a drag zooms, a double-click shows every event") {
  const Report& r = report();
  // The report with a script of our own at the end that drives the page as a user's mouse would (the events
  // the page listens to), recording the timeline's view after each step on <body>.
  std::string page = read(r.page);
  const std::string driver = R"(<script>
(function () {
  var body = document.body, plot = document.getElementById('timeline');
  document.querySelector('#legend li[data-category="other"]').click();
  body.setAttribute('data-after-click', plot.querySelector('polygon[data-category="other"]') ? 'shown' : 'hidden');
  var box = plot.getBoundingClientRect();
  function x(fraction) { return box.left + (84 + fraction * 1080) * box.width / 1180; }
  var y = box.top + box.height / 2;
  plot.dispatchEvent(new MouseEvent('mousedown', { clientX: x(0.25), clientY: y, button: 0, bubbles: true }));
  window.dispatchEvent(new MouseEvent('mousemove', { clientX: x(0.5), clientY: y, bubbles: true }));
  window.dispatchEvent(new MouseEvent('mouseup', { clientX: x(0.5), clientY: y, bubbles: true }));
  body.setAttribute('data-after-drag', plot.getAttribute('data-zoom'));
  plot.dispatchEvent(new MouseEvent('dblclick', { clientX: x(0.3), clientY: y, bubbles: true }));
  body.setAttribute('data-after-dblclick', plot.getAttribute('data-zoom'));
  document.querySelector('#legend li[data-category="other"]').click();
  body.setAttribute('data-after-second-click', plot.querySelector('polygon[data-category="other"]') ? 'shown' : 'hidden');
})();
</script>
)";
  const size_t end = page.rfind("</body>");
  REQUIRE(end != std::string::npos);
  page.insert(end, driver);
  const fs::path driven = out_dir / "driven.html";
  std::ofstream(driven, std::ios::binary) << page;
  const Browser b = browse(file_url(driven), "--window-size=1280,1000 --dump-dom", "driven");
  CHECK(console_lines(b.log).empty());
  REQUIRE(b.dom.find("data-rendered=\"yes\"") != std::string::npos);
  CHECK(attribute(b.dom, "data-after-click=", "data-after-click") == "hidden");
  CHECK(attribute(b.dom, "data-after-second-click=", "data-after-second-click") == "shown");
  // The drag covered the second quarter of the plot: the view is about events N/4 to N/2.
  const std::string whole = attribute(b.dom, "data-after-dblclick=", "data-after-dblclick");
  REQUIRE(whole.rfind("0-", 0) == 0);
  const double events = std::stod(whole.substr(2));
  const std::string dragged = attribute(b.dom, "data-after-drag=", "data-after-drag");
  const size_t dash = dragged.find('-');
  REQUIRE(dash != std::string::npos);
  CHECK(std::stod(dragged.substr(0, dash)) == doctest::Approx(events / 4).epsilon(0.02));
  CHECK(std::stod(dragged.substr(dash + 1)) == doctest::Approx(events / 2).epsilon(0.02));
}

TEST_CASE("html: a screenshot of the report, kept with the test output") {
  const Report& r = report();
  const fs::path png = out_dir / (kScenario + ".png");
  fs::remove(png);
  const Browser b = browse(
      file_url(r.page), "--hide-scrollbars --window-size=1280,2400 --screenshot=" + quote(png.string()), "screenshot");
  CHECK(console_lines(b.log).empty());
  REQUIRE(fs::exists(png));
  const std::string bytes = read(png);
  CHECK(bytes.size() > 10000);  // a drawn page, not an empty one
  CHECK(bytes.substr(1, 3) == "PNG");
  MESSAGE("screenshot: " << png.string());
}

TEST_CASE("html: a one-stream program's page shows nothing of streams") {
  const Report& r = report();
  const Browser b = browse(file_url(r.page), "--dump-dom", "one-stream");
  REQUIRE(b.dom.find("data-rendered=\"yes\"") != std::string::npos);
  CHECK(b.dom.find("id=\"stream-totals\"") == std::string::npos);
  CHECK(b.dom.find("data-stream-group=") == std::string::npos);
  CHECK(b.dom.find("data-state=\"pending\"") == std::string::npos);
  CHECK(b.dom.find("id=\"state-pending\"") == std::string::npos);
  CHECK(strip_tags(element(b.dom, "id=\"state-legend\"", "ul")).empty());
}

namespace {

// A program on two streams of sim, its report written to `page`; returns the side stream's id.
//   x: 1 << 20 floats = 4194304 B on the default stream, in a segment of its own of 20 MiB = 20971520 B
//      (a request between 1 MiB and 10 MiB gets a 20 MiB segment);
//   y = x * 2 on the side stream: 4194304 B in a 20 MiB segment of the side stream's own (a stream's blocks
//      never come from another stream's segments);
//   x used on the side stream (record_stream) and freed while the side stream has queued work: no longer
//      allocated, still active, until that work completes and a malloc completes the free;
//   after synchronize, z (4194304 B, default stream): that malloc completes x's free and z takes its place.
StreamId write_two_stream_report(const fs::path& page) {
  testing::FreshDevice fresh(kSim);
  MemoryStory story(kSim);
  Stream side = get_stream_from_pool(kSim);
  Tensor x = empty({1 << 20}, device(kSim));
  story.mark("x on the default stream");
  side.wait_stream(current_stream(kSim));
  testing::queue_busy_work(side);
  Tensor y;
  {
    StreamGuard on_side(side);
    y = x * 2;
  }
  x.record_stream(side);
  x = Tensor();
  story.mark("x freed while the side stream is busy");
  synchronize(kSim);
  Tensor z = empty({1 << 20}, device(kSim));
  story.mark("z after synchronize");
  write_memory_report(page.string(), story);
  return side.id();
}

}  // namespace

TEST_CASE("html: a two-stream program's page groups segments by stream and draws the pending free") {
  const fs::path page = out_dir / "two_streams.html";
  const StreamId side = write_two_stream_report(page);
  REQUIRE(side != 0);
  constexpr int64_t kBlock = 4194304, kSegment = 20971520;

  // Mark 1: x pending on the default stream, y allocated on the side stream.
  Browser b = browse(file_url(page) + "#mark=1", "--dump-dom", "two-streams-pending");
  INFO("chromium log:\n" << b.log);
  CHECK(console_lines(b.log).empty());
  REQUIRE(b.dom.find("data-rendered=\"yes\"") != std::string::npos);
  auto shown = [&](const std::string& id) { return strip_tags(element(b.dom, "id=\"" + id + "\"", "span")); };
  CHECK(shown("state-reserved") == std::to_string(2 * kSegment));
  CHECK(shown("state-allocated") == std::to_string(kBlock));
  CHECK(shown("state-segments") == "2");
  CHECK(shown("state-blocks") == "1");
  CHECK(shown("state-pending") == std::to_string(kBlock));
  CHECK(shown("state-pending-blocks") == "1");
  // One line per stream: the default stream (0) first, then the side stream, each with its own figures.
  const std::string default_line = strip_tags(element(b.dom, "data-stream-line=\"0\"", "div"));
  const std::string side_line = strip_tags(element(b.dom, "data-stream-line=\"1\"", "div"));
  CHECK(default_line.find("stream 0 (default)") == 0);
  CHECK(side_line.find("stream " + std::to_string(side) + ":") == 0);
  CHECK(shown("stream-0-reserved") == std::to_string(kSegment));
  CHECK(shown("stream-0-allocated") == "0");
  CHECK(shown("stream-0-pending") == std::to_string(kBlock));
  CHECK(shown("stream-1-reserved") == std::to_string(kSegment));
  CHECK(shown("stream-1-allocated") == std::to_string(kBlock));
  CHECK(b.dom.find("id=\"stream-1-pending\"") == std::string::npos);
  // The drawing: a heading per stream, each over its segment; the pending block drawn apart, and named in
  // the legend.
  const size_t default_group = b.dom.find("data-stream-group=\"0\"");
  const size_t side_group = b.dom.find("data-stream-group=\"1\"");
  REQUIRE(default_group != std::string::npos);
  REQUIRE(side_group != std::string::npos);
  CHECK(default_group < side_group);
  const size_t pending = b.dom.find("data-state=\"pending\"");
  REQUIRE(pending != std::string::npos);
  CHECK(b.dom.find("data-state=\"pending\"", pending + 1) == std::string::npos);  // x alone
  CHECK(default_group < pending);
  CHECK(pending < side_group);  // in the default stream's segment
  CHECK(strip_tags(element(b.dom, "data-legend=\"pending\"", "li")).find("pending free") == 0);

  // Mark 2: the malloc after synchronize completed x's free; z took its place.
  b = browse(file_url(page) + "#mark=2", "--dump-dom", "two-streams-done");
  CHECK(console_lines(b.log).empty());
  REQUIRE(b.dom.find("data-rendered=\"yes\"") != std::string::npos);
  CHECK(shown("state-reserved") == std::to_string(2 * kSegment));
  CHECK(shown("state-allocated") == std::to_string(2 * kBlock));
  CHECK(shown("state-pending") == "0");
  CHECK(shown("stream-0-allocated") == std::to_string(kBlock));
  CHECK(b.dom.find("data-state=\"pending\"") == std::string::npos);
  CHECK(b.dom.find("data-legend=\"pending\"") != std::string::npos);  // the legend stays for the whole page

  const fs::path png = out_dir / "two_streams.png";
  fs::remove(png);
  browse(file_url(page) + "#mark=1", "--hide-scrollbars --window-size=1280,1400 --screenshot=" + quote(png.string()),
         "two-streams-screenshot");
  CHECK(fs::exists(png));
}

int main(int argc, char** argv) {
  chromium = find_chromium();
  if (chromium.empty()) {
    std::cout << "html: no chromium found (PATH has no chromium, chromium-browser or google-chrome, and "
                 "BYTEGRAD_CHROMIUM is unset): skipping the browser test. Install Debian's `chromium`.\n";
    return 77;
  }
  fs::create_directories(out_dir);
  std::cout << "html: " << chromium << ", output in " << out_dir.string() << '\n';
  doctest::Context context(argc, argv);
  return context.run();
}
