//! Fuzzes policy parsing: never a panic, and a policy that loads is internally consistent.
#![no_main]

use cordon::testing::policy::Policy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = Policy::from_toml(text, "fuzz") {
        assert!(p.limits.timeout <= p.limits.max_timeout);
        assert!(p.limits.memory_bytes > 0 && p.limits.pids > 0);
        assert!(p.limits.disk_bytes > 0);
        // The spill area's cap leaves room for at least one full spill file.
        assert!(p.output.spill_total_bytes >= cordon::testing::exec::capture::SPILL_LIMIT);
        assert!(p.output.head_lines + p.output.tail_lines < p.output.max_lines);
        assert!(p.filesystem.protected.iter().all(|x| !x.starts_with('/')));
    }
});
