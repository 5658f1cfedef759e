//! A stdout route's checkpoint: a file of `key<TAB>value` lines, appended in order (an
//! empty value deletes the key) and rewritten with only the latest values once it has
//! grown to twice their number.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::error::{Refusal, StoreError};
use crate::checkpoint::progress::Records;
use crate::checkpoint::record::token;

pub struct FileStore {
    path: PathBuf,
    state: Mutex<State>,
}

struct State {
    /// The latest value of every key in the file.
    latest: HashMap<String, Vec<u8>>,
    /// Lines in the file.
    lines: usize,
}

impl FileStore {
    /// The checkpoint file of `route` in `directory` (created when missing).
    pub fn open(directory: &Path, route: &str) -> Result<FileStore, StoreError> {
        let path = directory.join(format!("{}.checkpoint", token(route)));
        let err = |source| StoreError::File { path: path.display().to_string(), source };
        fs::create_dir_all(directory).map_err(err)?;
        if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(StoreError::Refused { store: format!("file {}", path.display()), reason: Refusal::SymbolicLink });
        }
        let (latest, lines) = match no_follow().read(true).open(&path) {
            Ok(f) => read(f).map_err(err)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (HashMap::new(), 0),
            Err(e) => return Err(err(e)),
        };
        Ok(FileStore { path, state: Mutex::new(State { latest, lines }) })
    }

    pub fn load(&self, prefix: &str) -> Result<HashMap<String, Vec<u8>>, StoreError> {
        let state = self.lock();
        let prefix = format!("{prefix}.");
        Ok(state.latest.iter().filter(|(k, _)| k.starts_with(&prefix)).map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    pub fn write(&self, records: &Records) -> Result<(), StoreError> {
        let err = |source| StoreError::File { path: self.path.display().to_string(), source };
        let mut state = self.lock();
        let mut out = Vec::new();
        for (key, value) in records {
            line(&mut out, key, value.as_deref());
            match value {
                Some(v) => state.latest.insert(key.clone(), v.clone()),
                None => state.latest.remove(key),
            };
        }
        state.lines += records.len();
        if state.lines > 2 * state.latest.len() + 1000 {
            return self.rewrite(&mut state).map_err(err);
        }
        let mut f = no_follow().create(true).append(true).open(&self.path).map_err(err)?;
        f.write_all(&out).and_then(|()| f.sync_data()).map_err(err)
    }

    /// Replaces the file by one holding only the latest values (written aside, then
    /// renamed over it, so a crash leaves one or the other whole).
    fn rewrite(&self, state: &mut State) -> std::io::Result<()> {
        let mut keys: Vec<&String> = state.latest.keys().collect();
        keys.sort();
        let mut out = Vec::new();
        for key in keys {
            line(&mut out, key, Some(&state.latest[key]));
        }
        let aside = self.path.with_extension("checkpoint.new");
        let mut f = no_follow().write(true).create(true).truncate(true).open(&aside)?;
        f.write_all(&out)?;
        f.sync_all()?;
        fs::rename(&aside, &self.path)?;
        state.lines = state.latest.len();
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Options that refuse to open a symbolic link (ELOOP): a link put in the file's place is
/// never written through.
fn no_follow() -> OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = OpenOptions::new();
    options.custom_flags(libc::O_NOFOLLOW);
    options
}

fn line(out: &mut Vec<u8>, key: &str, value: Option<&[u8]>) {
    out.extend_from_slice(key.as_bytes());
    out.push(b'\t');
    out.extend_from_slice(value.unwrap_or_default());
    out.push(b'\n');
}

/// The latest values in a checkpoint file and its number of lines. A last line without
/// its newline (a write cut short) is left out; a line without a tab is kept as a key
/// with an unreadable value, so the checkpoint reads as corrupt.
fn read(mut reader: impl Read) -> std::io::Result<(HashMap<String, Vec<u8>>, usize)> {
    let mut data = Vec::new();
    reader.read_to_end(&mut data)?;
    let complete = data.iter().rposition(|b| *b == b'\n').map_or(&data[..0], |end| &data[..end]);
    let mut latest = HashMap::new();
    let mut lines = 0;
    for l in complete.split(|b| *b == b'\n').filter(|_| !complete.is_empty()) {
        lines += 1;
        let (key, value) = match l.iter().position(|b| *b == b'\t') {
            Some(i) => (&l[..i], &l[i + 1..]),
            None => (l, &b"\0"[..]),
        };
        let key = String::from_utf8_lossy(key).into_owned();
        if value.is_empty() {
            latest.remove(&key);
        } else {
            latest.insert(key, value.to_vec());
        }
    }
    Ok((latest, lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(items: &[(&str, Option<&str>)]) -> Records {
        items.iter().map(|(k, v)| (k.to_string(), v.map(|v| v.as_bytes().to_vec()))).collect()
    }

    #[test]
    fn latest_values_survive_reopening_and_rewriting() {
        let dir = std::env::temp_dir().join(format!("deltaship-checkpoint-{}", uuid::Uuid::new_v4()));
        let store = FileStore::open(&dir, "all").unwrap();
        store.write(&records(&[("c.all.x.o.a", Some("1")), ("c.all.x.o.b", Some("2")), ("other.x.o.a", Some("3"))])).unwrap();
        store.write(&records(&[("c.all.x.o.a", None), ("c.all.x.o.b", Some("4"))])).unwrap();
        let reopened = FileStore::open(&dir, "all").unwrap();
        let loaded = reopened.load("c.all").unwrap();
        assert_eq!(loaded, HashMap::from([("c.all.x.o.b".to_string(), b"4".to_vec())]));
        for i in 0..1200 {
            reopened.write(&records(&[("c.all.x.o.b", Some(&i.to_string()))])).unwrap();
        }
        let lines = fs::read_to_string(dir.join("all.checkpoint")).unwrap().lines().count();
        assert!(lines < 1100, "rewritten with the latest values: {lines} lines");
        assert_eq!(FileStore::open(&dir, "all").unwrap().load("c.all").unwrap()["c.all.x.o.b"], b"1199");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_checkpoint_file_replaced_by_a_symbolic_link_is_refused_and_never_written_through() {
        let dir = std::env::temp_dir().join(format!("deltaship-checkpoint-{}", uuid::Uuid::new_v4()));
        fs::create_dir_all(&dir).unwrap();
        let target = dir.join("elsewhere");
        fs::write(&target, "precious\n").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("all.checkpoint")).unwrap();
        let Err(refused) = FileStore::open(&dir, "all") else { panic!("a link opened") };
        assert!(refused.is_permanent() && refused.to_string().contains("symbolic link"), "{refused}");
        // A link put in place after the store was opened is not written through either.
        fs::remove_file(dir.join("all.checkpoint")).unwrap();
        let store = FileStore::open(&dir, "all").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("all.checkpoint")).unwrap();
        assert!(store.write(&records(&[("c.all.x.o.a", Some("1"))])).is_err());
        assert_eq!(fs::read_to_string(&target).unwrap(), "precious\n");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_line_cut_short_is_left_out() {
        let (latest, lines) = read(&b"k1\tv1\nk2\tv"[..]).unwrap();
        assert_eq!((latest.len(), lines), (1, 1));
        let (latest, _) = read(&b"k1\tv1\nbroken\n"[..]).unwrap();
        assert_eq!(latest["broken"], b"\0", "kept as unreadable");
    }
}
