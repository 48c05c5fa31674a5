//! The one sha256-to-hex used for component identities, durable replay
//! states and agent-history cursors.

use sha2::{Digest, Sha256};

/// sha256 of `bytes`, lowercase hex (64 characters).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_known_digest() {
        assert_eq!(
            super::sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
