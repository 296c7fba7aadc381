//! `cordon-init`: the sandbox init as a program of its own (launcher, PID 1, warm slots).
//!
//! The same code as `cordon __sandbox-init` (`cordon::app::confine::sandbox_init::init`), linked alone:
//! none of the server (MCP, TLS, grammars, the policy loader) is mapped into the processes
//! that wait in the sandbox, so every one of them costs its own few pages instead of a share
//! of the 100+ MB server binary, and the launcher's exec is that much shorter. The server
//! runs it when it sits beside the `cordon` binary (`cargo build` and `cargo install` put it
//! there) and falls back to `cordon __sandbox-init` otherwise.

#![deny(unsafe_code)]

fn main() {
    // Started by the server as `cordon-init __sandbox-init` (the argument the `cordon`
    // binary dispatches on); anything else is a person running it by hand.
    if std::env::args_os().nth(1).as_deref()
        != Some(std::ffi::OsStr::new(
            cordon::app::confine::sandbox_init::init::INIT_ARG,
        ))
    {
        eprintln!("cordon-init is started by `cordon serve` and `cordon exec`; run those instead");
        std::process::exit(2);
    }
    cordon::app::confine::sandbox_init::init::main();
}
