//! Who may hold the process's event-stream slots (`FREEWAY_MAX_STREAMS`).
//!
//! One cap for everyone let a single browser lock everybody out: a run's signed `events_url`
//! opened a thousand times held every slot, and every other user's stream, and the operator's,
//! got 503. So a slot is also counted against the run it follows and against the user it is
//! read for: a run holds at most [`PER_RUN`] streams, a user at most a tenth of the cap, and a
//! small reserve of the cap is left for the operator (the admin token) alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Streams one run's events may have open at once: a few tabs of one page.
pub const PER_RUN: usize = 4;

/// Who opens a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reader {
    /// The admin token: may use the operator's reserve.
    Operator,
    /// The API token for one user (`user_id`).
    User(String),
    /// The API token without a user, or the run's own signed token.
    Anyone,
}

/// Why no slot was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Every slot of the process is taken.
    Process,
    /// The run has [`PER_RUN`] streams open.
    Run,
    /// The user has its share open.
    User,
}

/// The process's stream slots and who holds them.
pub struct StreamSlots {
    /// Slots anyone may take.
    shared: Arc<Semaphore>,
    /// Slots only the operator may take, once the shared ones are gone.
    reserve: Arc<Semaphore>,
    per_user: usize,
    held: Mutex<HashMap<String, usize>>,
}

/// A held slot: given back, with its counts, when the stream closes.
pub struct StreamSlot {
    _permit: OwnedSemaphorePermit,
    keys: Vec<String>,
    slots: Arc<StreamSlots>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|e| e.into_inner());
        for key in &self.keys {
            if let Some(n) = held.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    held.remove(key);
                }
            }
        }
    }
}

impl StreamSlots {
    /// `max` slots in all: a twentieth of them reserved for the operator, a tenth (at least
    /// [`PER_RUN`]) the most one user holds.
    pub fn new(max: usize) -> Arc<StreamSlots> {
        let reserve = max / 20;
        Arc::new(StreamSlots {
            shared: Arc::new(Semaphore::new(max - reserve)),
            reserve: Arc::new(Semaphore::new(reserve)),
            per_user: (max / 10).max(PER_RUN),
            held: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for `reader` to follow `run_id`, or which limit stands in the way.
    pub fn take(self: &Arc<Self>, run_id: &str, reader: &Reader) -> Result<StreamSlot, Full> {
        let mut limits = vec![(format!("run:{run_id}"), PER_RUN, Full::Run)];
        if let Reader::User(user) = reader {
            limits.push((format!("user:{user}"), self.per_user, Full::User));
        }
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, full)) = limits
            .iter()
            .find(|(key, most, _)| held.get(key).copied().unwrap_or(0) >= *most)
        {
            return Err(*full);
        }
        let permit = match self.shared.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) if *reader == Reader::Operator => self
                .reserve
                .clone()
                .try_acquire_owned()
                .map_err(|_| Full::Process)?,
            Err(_) => return Err(Full::Process),
        };
        let keys: Vec<String> = limits.into_iter().map(|(key, _, _)| key).collect();
        for key in &keys {
            *held.entry(key.clone()).or_default() += 1;
        }
        Ok(StreamSlot {
            _permit: permit,
            keys,
            slots: self.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_run_one_user_and_everyone_hold_only_their_share() {
        let slots = StreamSlots::new(40);
        let mut open = Vec::new();
        for _ in 0..PER_RUN {
            open.push(slots.take("run_a", &Reader::Anyone).unwrap());
        }
        assert_eq!(slots.take("run_a", &Reader::Anyone).err(), Some(Full::Run));
        assert_eq!(
            slots.take("run_a", &Reader::Operator).err(),
            Some(Full::Run)
        );
        open.pop();
        assert!(
            slots.take("run_a", &Reader::Anyone).is_ok(),
            "a closed stream frees its slot"
        );
        let bob = Reader::User("bob".into());
        let mut bobs = Vec::new();
        for n in 0..4 {
            bobs.push(slots.take(&format!("run_b{n}"), &bob).unwrap());
        }
        assert_eq!(slots.take("run_b9", &bob).err(), Some(Full::User));
        // Everyone else fills the shared slots; the operator still gets the reserve.
        let mut others = Vec::new();
        let mut n = 0;
        while let Ok(slot) = slots.take(&format!("run_o{n}"), &Reader::Anyone) {
            others.push(slot);
            n += 1;
        }
        assert_eq!(
            open.len() + bobs.len() + others.len(),
            38,
            "40 less the reserve of 2"
        );
        assert!(slots.take("run_x", &Reader::Operator).is_ok());
    }
}
