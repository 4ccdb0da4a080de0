//! The board and a web app's page in a real browser (Chromium, through the scripts in the
//! root's `tests/browser`).

#[path = "../common/mod.rs"]
mod common;

mod board;
mod webapp;
