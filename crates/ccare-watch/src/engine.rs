//! The stream watch engine (SW-1 .. SW-7). (Being written.)
