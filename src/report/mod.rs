//! Reports of a plan for people and tools. (Being written.)
