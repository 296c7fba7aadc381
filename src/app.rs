//! What the binaries (`cordon`, src/main.rs, and `cordon-init`, src/bin/cordon-init.rs) reach
//! of the crate: the entry points of each subcommand and the few types their arguments are
//! made of, under the paths of the modules that hold them (`cordon::app::server::serve_stdio`
//! is `crate::server::serve_stdio`). Hidden from the docs: it is not an API.

pub mod cli {
    pub mod approvals {
        pub use crate::cli::approvals::{answer, dir_or_default, list, render, watch};
    }
    pub mod checkpoints {
        pub use crate::cli::checkpoints::{Action, run};
    }
    pub mod lint {
        pub use crate::cli::lint::{exit_code, render, run, runtime};
    }
    pub mod policy {
        pub use crate::cli::policy::{check, check_examples, explain, show};
    }
    pub mod replay {
        pub use crate::cli::replay::{render, run};
    }
    pub mod subject {
        pub use crate::cli::subject::{SubjectQuery, explain_subject};
    }
    pub mod workspace {
        pub use crate::cli::workspace::resolve_from_env;
    }
}
pub mod clock {
    pub use crate::clock::Utc;
}
pub mod confine {
    pub use crate::confine::mark_inherited_descriptors_cloexec;
    pub mod audit {
        pub use crate::confine::audit::{Availability, release, start};
    }
    pub mod sandbox_init {
        pub mod init {
            pub use crate::confine::sandbox_init::init::{INIT_ARG, main};
        }
    }
    pub mod selftest {
        pub use crate::confine::selftest::run;
    }
}
pub mod doctor {
    pub use crate::doctor::run;
    pub mod bench {
        pub use crate::doctor::bench::{BenchOptions, run};
    }
}
pub mod exec {
    pub use crate::exec::ExecRequest;
    pub use crate::exec::capture::CaptureSpec;
    pub use crate::exec::program::Program;
}
pub mod parser {
    pub use crate::parser::worker_program;
    pub mod worker {
        pub use crate::parser::worker::run;
    }
}
pub mod policy {
    pub use crate::policy::model::{Policy, TimeoutError, timeout_within};
}
pub mod runtime {
    pub use crate::runtime::{AuditTarget, Runtime, RuntimeOptions, Session};
}
pub mod server {
    pub use crate::server::CordonServer;
    pub use crate::server::stdio::{StopSignals, serve_stdio};
    pub mod failed_start {
        pub use crate::server::failed_start::{WAIT_FOR_REQUEST, answer_first_request};
    }
    pub mod http {
        pub use crate::server::http::{HttpOptions, serve};
        pub mod auth {
            pub use crate::server::http::auth::{Authenticator, TokenSource};
        }
    }
    pub mod workspaces {
        pub use crate::server::workspaces::SubjectWorkspaces;
    }
}
