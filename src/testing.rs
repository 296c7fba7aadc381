//! What the integration tests (`tests/it`), the benches and the fuzz targets reach of the
//! crate, and nothing more: the crate's modules are `pub(crate)`, and this mirror of their
//! paths re-exports only the items those need (`cordon::testing::exec::Program` is
//! `crate::exec::Program`). Hidden from the docs: it is not an API.

pub mod audit {
    pub use crate::audit::{CALL_ORIGIN, CallOrigin};
}
pub mod confine {
    pub use crate::confine::cgroup::{CallCgroup, CallLimits, CgroupMode};
    pub use crate::confine::child::ChildSetup;
    pub use crate::confine::{Confinement, confine_on_spawn};
    pub mod audit {
        pub use crate::confine::audit::{Availability, probe, rule_in_force};
        pub mod host {
            pub use crate::confine::audit::host::{CORDON_LOGINUID, STATE_DIR};
        }
    }
    pub mod sandbox_init {
        pub mod wire {
            pub use crate::confine::sandbox_init::wire::{
                FromInit, FromSlot, MAX_FDS, MAX_MESSAGE, ToInit, ToSlot, decode, encode,
            };
        }
    }
    pub mod selftest {
        pub use crate::confine::selftest::isolation::HostSysvObjects;
    }
}
pub mod egress {
    pub use crate::egress::proxy::{CallTicket, NetworkReport, Proxy};
    pub mod admission {
        pub use crate::egress::admission::{Limits, MAX_ESTABLISHED, MAX_ESTABLISHED_PER_CALL};
    }
    pub mod canon {
        pub use crate::egress::canon::canonical;
    }
    pub mod credentials {
        pub use crate::egress::credentials::basic_authorization;
    }
    pub mod http {
        pub use crate::egress::http::{
            ChunkedEnd, MAX_HEAD, MAX_HEADERS, Request, host_matches, parse_head,
            parse_request_line,
        };
    }
    pub mod pattern {
        pub use crate::egress::pattern::{HostPattern, Target};
    }
    pub mod pktline {
        pub use crate::egress::pktline::{parse_commands, refusal_report};
    }
    pub mod proxy {
        pub use crate::egress::proxy::{HEAD_TIMEOUT, ListenerGuard, ProxyOptions, Resolve};
    }
    pub mod rules {
        pub use crate::egress::site::Site;
    }
    pub mod secrets {
        pub use crate::egress::secrets::{
            BoundHost, CredentialRule, Detector, Inject, Secret, SecretSource, Vault,
        };
    }
    pub mod tls {
        pub use crate::egress::tls::Authority;
    }
    pub mod upstream {
        pub use crate::egress::upstream::{describe, parse_head};
    }
}
pub mod exec {
    pub use crate::exec::capture::{CaptureSpec, Captured};
    pub use crate::exec::outcome::LimitKind;
    pub use crate::exec::program::Program;
    pub use crate::exec::{ExecRequest, Executor};
    pub mod capture {
        pub use crate::workspace::spill::SPILL_LIMIT;
    }
    pub mod process {
        pub use crate::exec::process::{Process, SlotSpawn, spawn_in_slot};
    }
    pub mod steps {
        pub use crate::exec::steps::STEP_NAMES;
    }
}
pub mod files {
    pub use crate::files::diff::unified_diff;
    pub use crate::files::edit::{Edit, EditError, apply_edits};
    pub use crate::files::read::{ReadError, read_lines};
}
pub mod git {
    pub mod index_file {
        pub use crate::git::index_file::{
            Change, EntryTable, IndexFileError, Piece, cache_tree_root,
            cache_tree_root_in_extensions, edit, edit_pieces, edit_pieces_at, entry_table,
            eoie_extensions_offset, eoie_tail_len, trailer, trailer_of,
        };
    }
    pub mod loose {
        pub use crate::git::loose::{MAX_OBJECT, decode};
    }
    pub mod vet {
        pub use crate::git::vet::{Commit, Entry, Mode, commit, plain_name, tree, tree_order};
    }
}
pub mod glob {
    pub use crate::glob::matches;
}
pub mod interpreter {
    pub use crate::interpreter::session::{CellOutcome, CellRequest};
    pub use crate::interpreter::{InterpreterError, SessionManager};
    pub mod protocol {
        pub use crate::interpreter::protocol::{Ready, read_frame};
    }
}
pub mod lint {
    pub use crate::lint::diagnostic::{Diagnostic, LintReport, Severity};
    pub use crate::lint::introduced::mark_introduced;
    pub mod formats {
        pub use crate::lint::formats::compiled::parse_builtin;
        pub use crate::lint::formats::config::{LinterConfig, OutputFormat};
        pub use crate::lint::formats::context::ParseError;
    }
    pub mod syntax {
        pub use crate::lint::syntax::diagnostics;
    }
}
pub mod parser {
    pub use crate::parser::client::{ParserClient, ParserConfig, ParserError};
    pub mod client {
        pub use crate::parser::client::MAX_STARTS;
    }
    pub mod protocol {
        pub use crate::parser::protocol::{
            MAX_FRAME, Request, Response, SyntaxOutcome, decode_body, decode_frame, encode,
            read_body,
        };
    }
    pub mod syntax {
        pub use crate::parser::syntax::{
            CheckError, Language, MAX_SYNTAX_ERRORS, check, check_with_budget, detect_language,
            language_for_path, language_for_shebang,
        };
    }
}
pub mod policy {
    pub use crate::policy::load::embedded_names;
    pub use crate::policy::model::Policy;
    pub use crate::shape::OutputPolicy;
}
pub mod runtime {
    pub use crate::runtime::{Runtime, RuntimeOptions, Session};
}
pub mod shape {
    pub use crate::shape::shape_stream;
}
pub mod tools {
    pub use crate::tools::SharedContext;
    pub mod code_interpreter {
        pub use crate::tools::code_interpreter::run;
    }
    pub mod edit_file {
        pub use crate::tools::edit_file::EditFileArgs;
    }
    pub mod read_file {
        pub use crate::tools::read_file::ReadFileArgs;
    }
    pub mod shell_exec {
        pub use crate::tools::shell_exec::ShellExecArgs;
    }
    pub mod write_file {
        pub use crate::tools::write_file::WriteFileArgs;
    }
}
pub mod workspace {
    pub use crate::workspace::Workspace;
    pub use crate::workspace::error::PathError;
    pub use crate::workspace::protect::{GIT_CONTROL_PATHS, existing_protected};
    pub use crate::workspace::relpath::RelPath;
    pub use crate::workspace::write::{WriteReport, WriteRules};
    pub mod gitconfig {
        pub use crate::workspace::gitconfig::{parse, vet};
    }
    pub mod gitlinks {
        pub use crate::workspace::gitlinks::{MAX_GITLINKS, gitlinks};
    }
    pub mod protect {
        pub use crate::workspace::protect::{IdentitySnapshot, protected_entry};
    }
}
