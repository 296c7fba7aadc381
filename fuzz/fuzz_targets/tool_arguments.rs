//! Fuzzes tool argument parsing as rmcp does it (serde from JSON): no panic, and unknown
//! fields are always rejected (the schemas promise `additionalProperties: false`).
#![no_main]

use cordon::testing::tools::edit_file::EditFileArgs;
use cordon::testing::tools::read_file::ReadFileArgs;
use cordon::testing::tools::shell_exec::ShellExecArgs;
use cordon::testing::tools::write_file::WriteFileArgs;
use libfuzzer_sys::fuzz_target;

fn check<T: serde::de::DeserializeOwned>(v: &serde_json::Value) {
    let parsed = serde_json::from_value::<T>(v.clone());
    if let (Ok(_), Some(obj)) = (&parsed, v.as_object()) {
        let mut extra = obj.clone();
        extra.insert("__unknown_field__".into(), serde_json::Value::Null);
        assert!(serde_json::from_value::<T>(serde_json::Value::Object(extra)).is_err());
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    check::<ShellExecArgs>(&v);
    check::<WriteFileArgs>(&v);
    check::<EditFileArgs>(&v);
    check::<ReadFileArgs>(&v);
});
