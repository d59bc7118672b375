// The kind of graft::Error a call throws (a test failure if it throws none).
#pragma once
#include <gtest/gtest.h>

#include <functional>

#include "graft/core/error.h"

namespace graft::test {

inline ErrorKind kind_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no error";
  return ErrorKind::kInternal;
}

}  // namespace graft::test
