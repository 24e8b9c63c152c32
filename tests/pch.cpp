// Builds the tests' precompiled header (tests/CMakeLists.txt: dualcast_tests_pch), which every
// test executable linking dualcast::compiled reuses; nothing of its own.
