//! The quota scenario's oracle: what a client that knew the simulated account's real window
//! could have made of the runs' arrivals. It plays the same three windows as the simulator
//! (`sim/src/account.rs`), counting only the calls it makes, since it never earns a refusal.

use crate::args::SimWindow;
use std::collections::VecDeque;

pub(crate) struct Oracle {
    window: SimWindow,
    rpm: usize,
    window_ms: u64,
    /// Fixed windows: the current one's start and its calls.
    start_ms: u64,
    in_window: usize,
    /// Sliding: the calls of the last window, oldest first.
    recent: VecDeque<u64>,
}

impl Oracle {
    pub(crate) fn new(window: SimWindow, rpm: u32, window_ms: u64) -> Oracle {
        Oracle {
            window,
            rpm: rpm as usize,
            window_ms,
            start_ms: 0,
            in_window: 0,
            recent: VecDeque::new(),
        }
    }

    /// The earliest moment at or after `at` at which the account serves a call, and that call
    /// made: a call takes the first slot it can.
    pub(crate) fn call(&mut self, at: u64) -> u64 {
        let w = self.window_ms;
        match self.window {
            SimWindow::Epoch | SimWindow::FirstCall => {
                let mut t = at;
                let mut start = self.start_for(t);
                if start == self.start_ms && self.in_window >= self.rpm {
                    t = self.start_ms + w;
                    start = self.start_for(t);
                }
                if start != self.start_ms {
                    (self.start_ms, self.in_window) = (start, 0);
                }
                self.in_window += 1;
                t
            }
            SimWindow::Sliding => {
                let t = if self.recent.len() >= self.rpm {
                    at.max(self.recent[self.recent.len() - self.rpm] + w)
                } else {
                    at
                };
                self.recent.push_back(t);
                if self.recent.len() > self.rpm {
                    self.recent.pop_front();
                }
                t
            }
        }
    }

    /// Whether the account would serve a call at `at` itself; makes the call if so.
    pub(crate) fn try_call(&mut self, at: u64) -> bool {
        let free = match self.window {
            SimWindow::Epoch | SimWindow::FirstCall => {
                self.start_for(at) != self.start_ms || self.in_window < self.rpm
            }
            SimWindow::Sliding => {
                self.recent.len() < self.rpm
                    || self.recent[self.recent.len() - self.rpm] + self.window_ms <= at
            }
        };
        if free {
            self.call(at);
        }
        free
    }

    /// The start of the fixed window a call at `t` falls in.
    fn start_for(&self, t: u64) -> u64 {
        match self.window {
            SimWindow::FirstCall if t < self.start_ms + self.window_ms => self.start_ms,
            SimWindow::FirstCall => t,
            _ => t - t % self.window_ms,
        }
    }
}
