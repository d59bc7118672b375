// What a call refuses with: the kind or message of the graft::Error it throws, or a check that the
// message names what it should.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "graft/core/error.h"

namespace graft::test {

// The kind of graft::Error fn throws (a test failure if it throws none).
inline ErrorKind kind_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no error";
  return ErrorKind::kInternal;
}

// The message of the graft::Error fn throws ("" when it throws none).
inline std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// fn throws a graft::Error whose message holds every one of `needles` (a test failure otherwise).
inline void expect_refused(const std::function<void()>& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "not refused; expected an error containing: " << needles.at(0);
  } catch (const Error& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

}  // namespace graft::test
