//! The shared generic test suite run against every lock of the workspace (skeleton).
