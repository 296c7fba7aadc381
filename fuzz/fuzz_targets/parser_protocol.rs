//! Fuzzes the parser worker's frame decoder from both ends: whatever bytes arrive (a
//! subverted worker's answers, a confused server's requests), decoding returns a message or an
//! error and never panics or allocates past the frame bound; every message it accepts
//! re-encodes to a frame that decodes to the same message.
#![no_main]

use cordon::testing::parser::protocol::{
    MAX_FRAME, Request, Response, decode_body, decode_frame, encode, read_body,
};
use libfuzzer_sys::fuzz_target;

fn round_trip<T>(bytes: &[u8])
where
    T: serde::Serialize + for<'de> serde::Deserialize<'de> + PartialEq + std::fmt::Debug,
{
    if let Ok(Some((message, used))) = decode_frame::<T>(bytes) {
        assert!(used <= bytes.len() && used <= MAX_FRAME + 5);
        let again = encode(&message).expect("an accepted message encodes");
        let (back, _) = decode_frame::<T>(&again)
            .expect("a re-encoded frame decodes")
            .expect("and is complete");
        assert_eq!(back, message);
    }
    let _ = decode_body::<T>(bytes);
}

fuzz_target!(|bytes: &[u8]| {
    round_trip::<Request>(bytes);
    round_trip::<Response>(bytes);
    if let Ok(Some(body)) = read_body(&mut &bytes[..]) {
        assert!(body.len() <= MAX_FRAME);
        if let Ok(request) = decode_body::<Request>(&body) {
            let _ = request.validate();
        }
    }
});
