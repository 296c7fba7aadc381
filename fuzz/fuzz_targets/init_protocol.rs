//! Fuzzes the sandbox init's message decoder (server ↔ init ↔ slot datagrams): whatever bytes
//! arrive, decoding returns a message or an error and never panics; an accepted job either
//! passes the slot's validation or is refused, and every accepted message re-encodes to bytes
//! that decode to the same message.
#![no_main]

use cordon::testing::confine::sandbox_init::wire::{
    FromInit, FromSlot, MAX_FDS, MAX_MESSAGE, ToInit, ToSlot, decode, encode,
};
use libfuzzer_sys::fuzz_target;

fn round_trip<T>(bytes: &[u8]) -> Option<T>
where
    T: serde::Serialize + for<'de> serde::Deserialize<'de> + PartialEq + std::fmt::Debug,
{
    let message = decode::<T>(bytes, MAX_MESSAGE).ok()?;
    let again = encode(&message).expect("an accepted message encodes");
    assert_eq!(decode::<T>(&again, usize::MAX).expect("re-encoded decodes"), message);
    Some(message)
}

fuzz_target!(|data: &[u8]| {
    let _ = round_trip::<ToInit>(data);
    let _ = round_trip::<FromInit>(data);
    let _ = round_trip::<FromSlot>(data);
    if let Some(ToSlot::Exec(exec)) = round_trip::<ToSlot>(data) {
        for received in 0..=MAX_FDS + 1 {
            let _ = exec.validate(received);
        }
    }
});
