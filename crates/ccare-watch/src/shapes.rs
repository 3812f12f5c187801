//! The pre-step loop shapes (LS-1, LS-2). (Being written.)
