//! The modern core against scripted server answers.
