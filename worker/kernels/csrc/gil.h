// Lets other Python threads run while a long native call computes.
#pragma once

#include <Python.h>

namespace astrai {

// Releases the GIL for its lifetime when the calling thread holds it (a call from Python),
// and does nothing otherwise (a call from C++ or a thread that never held it).
//
// Why: a decode step spends ~8 ms inside one call; holding the GIL there kept the worker's
// I/O thread from sending the previous step's tokens until the call returned, and then made
// the engine thread wait for the I/O thread's turn (CPython hands the GIL over on request).
// The call touches tensors only, never a Python object.
class ReleasedGil {
 public:
  ReleasedGil()
      : state_(Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
  ~ReleasedGil() {
    if (state_ != nullptr) PyEval_RestoreThread(state_);
  }
  ReleasedGil(const ReleasedGil&) = delete;
  ReleasedGil& operator=(const ReleasedGil&) = delete;

 private:
  PyThreadState* state_;
};

}  // namespace astrai
