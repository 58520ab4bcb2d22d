//! The seeded draws of selection: ChaCha20 streams, uniform integers by rejection and Fisher–Yates
//! ("The draws" in [`selection`](crate::selection)).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The draws of one stream.
pub(super) struct Draws(pub(super) ChaCha20Rng);

/// Bytes 8..27 of the key.
const KEY_TAG: &[u8; 19] = b"vcurve/selection/v1";
/// The stream of the decoy order.
pub const DECOY_STREAM: u64 = 10;

impl Draws {
    pub(super) fn new(seed: u64, stream: u64) -> Self {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..8 + KEY_TAG.len()].copy_from_slice(KEY_TAG);
        Draws::from_key(key, stream)
    }

    pub(super) fn from_key(key: [u8; 32], stream: u64) -> Self {
        let mut rng = ChaCha20Rng::from_seed(key);
        rng.set_stream(stream);
        Draws(rng)
    }

    /// Uniform in `[0, m)` by rejection; `0` for `m = 0`.
    pub(super) fn below(&mut self, m: u64) -> u64 {
        if m == 0 {
            return 0;
        }
        let zone = (1u128 << 64) / u128::from(m) * u128::from(m);
        loop {
            let x = self.0.next_u64();
            if u128::from(x) < zone {
                return x % m;
            }
        }
    }

    pub(super) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}
