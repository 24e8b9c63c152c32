// bench/gradbench/protocol.hpp: GradBench's JSON-lines protocol (CONTRIBUTING.md, "Protocol") on
// stdin / stdout: one message per line in, exactly one response line out, until end of input.
//
//   start    -> {"id", "tool": "dualcast"}
//   define   -> {"id", "success": true} for a module in the registry, else success false + error
//   evaluate -> {"id", "success": true, "output", "timings": [prepare, evaluate x runs]}
//               or {"id", "success": false, "error"} (malformed message, unknown function, bad
//               input, an exception while computing)
//   analysis and anything else -> {"id"}
//
// A line that is not a JSON object, or has no integer id, is answered with "id": null and an
// error: the eval waits for one line per message, so silence would hang it. An evaluate asking
// for more than input_limits() (registry.hpp: sizes beside the numbers, min_runs, min_seconds)
// fails with an error saying so. tests/fuzz/fuzz_gradbench.cpp feeds this reader any bytes.
#pragma once

#include "registry.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <iostream>
#include <string>

namespace gradbench {

using json = nlohmann::json;

// Runs `fn` on `input` as the protocol asks: prepare once (timed as "prepare"), then evaluate
// at least min_runs times and until the evaluations took min_seconds in all, one "evaluate"
// timing per run; the output is the last run's. JSON decoding and encoding are outside both.
inline json evaluate(function const &fn, json const &input) {
  std::int64_t min_runs = 1;
  double min_seconds = 0;
  if (input.is_object()) {
    if (auto it = input.find("min_runs"); it != input.end()) {
      if (!it->is_number_integer() || it->get<std::int64_t>() < 0 ||
          it->get<std::int64_t>() > input_limits().max_runs)
        throw input_error("min_runs must be an integer in [0, " +
                          std::to_string(input_limits().max_runs) + "]");
      min_runs = it->get<std::int64_t>();
    }
    if (auto it = input.find("min_seconds"); it != input.end()) {
      if (!it->is_number() || !(it->get<double>() >= 0) ||
          !(it->get<double>() <= input_limits().max_seconds))
        throw input_error("min_seconds must be a number in [0, " +
                          shortest(input_limits().max_seconds) + "]");
      min_seconds = it->get<double>();
    }
  }
  using clock = std::chrono::steady_clock;
  auto ns = [](clock::duration d) {
    return std::int64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  };
  auto parsed = fn.parse(input); // JSON -> the module's input structure (not timed)
  json timings = json::array();
  auto t0 = clock::now();
  auto job = parsed->prepare();
  timings.push_back({{"name", "prepare"}, {"nanoseconds", ns(clock::now() - t0)}});
  double elapsed = 0;
  // (at least one run even for min_runs 0: the output is the last run's)
  for (std::int64_t run = 0; run == 0 || run < min_runs || elapsed < min_seconds; ++run) {
    auto start = clock::now();
    job->run();
    auto took = ns(clock::now() - start);
    timings.push_back({{"name", "evaluate"}, {"nanoseconds", took}});
    elapsed += double(took) * 1e-9;
  }
  return {{"success", true}, {"output", job->output()}, {"timings", timings}};
}

// The response to one message (its id added by the caller).
inline json respond(registry const &modules, json const &message) {
  std::string const kind = message.value("kind", std::string());
  if (kind == "start")
    return {{"tool", "dualcast"}};
  if (kind == "define") {
    auto it = message.find("module");
    if (it == message.end() || !it->is_string())
      return {{"success", false}, {"error", "define: the message has no module name"}};
    if (modules.find(it->get<std::string>()))
      return {{"success", true}};
    return {{"success", false},
            {"error", "dualcast does not implement module '" + it->get<std::string>() + "'"}};
  }
  if (kind == "evaluate") {
    auto mod = message.find("module"), fun = message.find("function");
    if (mod == message.end() || !mod->is_string() || fun == message.end() || !fun->is_string())
      return {{"success", false}, {"error", "evaluate: the message needs module and function"}};
    auto const *fn = modules.find(mod->get<std::string>(), fun->get<std::string>());
    if (!fn)
      return {{"success", false},
              {"error", "dualcast has no function '" + fun->get<std::string>() + "' in module '" +
                            mod->get<std::string>() + "'"}};
    if (!message.contains("input"))
      return {{"success", false}, {"error", "evaluate: the message has no input"}};
    try {
      return evaluate(*fn, message["input"]);
    } catch (std::exception const &e) { // bad input, or a failure while computing
      return {
          {"success", false},
          {"error", mod->get<std::string>() + "::" + fun->get<std::string>() + ": " + e.what()}};
    }
  }
  return json::object(); // analysis (and kinds this tool does not know): acknowledge
}

// The message loop: returns at end of input (the eval has finished).
inline int serve(registry const &modules, std::istream &in, std::ostream &out) {
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue; // blank lines carry no message
    json response;
    try {
      json message = json::parse(line);
      if (!message.is_object() || !message.contains("id") || !message["id"].is_number_integer())
        response = {{"id", nullptr},
                    {"success", false},
                    {"error", "a message must be a JSON object with an integer id"}};
      else {
        response = respond(modules, message);
        response["id"] = message["id"];
      }
    } catch (std::exception const &e) {
      response = {
          {"id", nullptr}, {"success", false}, {"error", std::string("bad message: ") + e.what()}};
    }
    // (invalid UTF-8 in an echoed name is replaced, not thrown)
    out << response.dump(-1, ' ', false, json::error_handler_t::replace) << '\n' << std::flush;
  }
  return 0;
}

} // namespace gradbench
