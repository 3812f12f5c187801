//! The output-pattern detector (OP-1 .. OP-5). (Being written.)
