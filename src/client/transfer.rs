//! `pigeonhole export [FILE]` and `pigeonhole import FILE`: one account of both services as
//! one JSON file, `{"format": "pigeonhole-export", "version": 1, "inbox": …, "scheduler": …}`
//! (docs/backup.md), through each service's `/account/export` and `/account/import`.
//!
//! Import sends each service's part in pieces of at most [`PIECE_BYTES`] of items, so that
//! no request meets the server's body cap (16 MiB by default) however large the account:
//! first every piece as a check (`"dry-run": true`, nothing stored), then every piece for
//! real. A file with a bad item is refused before anything is stored; each piece is stored
//! atomically, and importing again after an interruption completes the rest (what is there
//! is kept).

use super::error::ClientError;
use super::Client;
use crate::config::{ExportArgs, ImportArgs};
use crate::domain::transfer::{FILE_FORMAT, VERSION};
use serde_json::{json, Map, Value};
use std::io::Write;
use std::path::Path;
use tokio::sync::mpsc;

/// The most bytes of items one import request carries (well under the default body cap).
const PIECE_BYTES: usize = 4 * 1024 * 1024;

pub async fn export(args: ExportArgs) -> Result<(), ClientError> {
    let client = Client::open(&args.opts)?;
    let inbox = client.inbox.get_json("/account/export").await?;
    let scheduler = client.scheduler.get_json("/account/export").await?;
    let file = json!({"format": FILE_FORMAT, "version": VERSION, "inbox": inbox, "scheduler": scheduler});
    let mut text = serde_json::to_vec_pretty(&file).map_err(|e| ClientError::local(e.to_string()))?;
    text.push(b'\n');
    match &args.file {
        None => match std::io::stdout().write_all(&text) {
            // a reader that went away (`| head`): a quiet end
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            other => other.map_err(|e| ClientError::local(format!("cannot write the export: {e}"))),
        },
        Some(path) => {
            // private: an inbox trigger's access key is in it
            super::settings::write_private(path, &text)?;
            let count = |v: &Value, k: &str| v[k].as_array().map_or(0, Vec::len);
            eprintln!(
                "exported {} inbox items, {} scheduled and {} triggered items, {} triggers to {}",
                count(&inbox, "items"),
                count(&scheduler, "scheduled"),
                count(&scheduler, "triggered"),
                count(&scheduler, "triggers"),
                path.display()
            );
            Ok(())
        }
    }
}

/// The parts of an export file and the lists of each that are cut into pieces.
const PARTS: [(&str, &[&str]); 2] = [
    ("inbox", &["items"]),
    ("scheduler", &["scheduled", "triggered", "triggers"]),
];

/// How long one `POST /account/import` may take: it waits while another import runs at
/// the server (one at a time), then stores its piece in batches.
const IMPORT_LIMIT: std::time::Duration = std::time::Duration::from_secs(900);

/// A request's worth of one service's part: the JSON body of one `POST /account/import`.
struct Piece {
    /// 0: inbox, 1: scheduler (the order of [`PARTS`]).
    part: usize,
    body: Vec<u8>,
    /// Elements of its lists.
    items: usize,
}

/// Reads the export file `path` as a stream (one list element in memory at a time) and
/// hands its pieces to `emit`, in the file's order: each part's list elements in runs of at
/// most `limit` bytes (an element larger than that goes alone), the part's other fields
/// (settings, access keys, its format and version) with its last piece; the pieces before
/// it name the service's format. With `dry_run` each piece asks only for a check. The file's
/// own format and version are checked at its end.
fn cut(
    path: &Path,
    limit: usize,
    dry_run: bool,
    emit: &mut dyn FnMut(Piece) -> Result<(), String>,
) -> Result<(), ClientError> {
    use serde::de::DeserializeSeed;
    let file = std::fs::File::open(path).map_err(|e| ClientError::file("cannot read", path, e))?;
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 16, file));
    let mut failed = None;
    let read = cutter::File {
        limit,
        dry_run,
        emit,
        failed: &mut failed,
    }
    .deserialize(&mut de)
    .and_then(|top| de.end().map(|()| top));
    if let Some(e) = failed {
        return Err(ClientError::local(e));
    }
    let top = read.map_err(|e| ClientError::NotA {
        path: path.to_owned(),
        what: "a Pigeonhole export",
        why: e.to_string(),
    })?;
    if top.format.as_ref().and_then(Value::as_str) != Some(FILE_FORMAT)
        || top.version.as_ref().and_then(Value::as_u64) != Some(VERSION)
    {
        return Err(ClientError::input(format!(
            "{} is not a Pigeonhole export (format {FILE_FORMAT:?}, version {VERSION})",
            path.display()
        )));
    }
    for (i, (name, _)) in PARTS.iter().enumerate() {
        if !top.parts[i] {
            return Err(ClientError::input(format!("{} has no {name:?} part", path.display())));
        }
    }
    Ok(())
}

/// The streaming reader of [`cut`].
mod cutter {
    use super::{Piece, PARTS};
    use crate::domain::transfer::{INBOX_FORMAT, SCHEDULER_FORMAT, VERSION};
    use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Value};
    use std::fmt;

    pub(super) struct Top {
        pub format: Option<Value>,
        pub version: Option<Value>,
        pub parts: [bool; 2],
    }

    pub(super) struct File<'a, 'b> {
        pub limit: usize,
        pub dry_run: bool,
        pub emit: &'a mut (dyn FnMut(Piece) -> Result<(), String> + 'b),
        pub failed: &'a mut Option<String>,
    }

    impl<'de> DeserializeSeed<'de> for File<'_, '_> {
        type Value = Top;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Top, D::Error> {
            d.deserialize_map(self)
        }
    }

    impl<'de> Visitor<'de> for File<'_, '_> {
        type Value = Top;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
            let mut top = Top {
                format: None,
                version: None,
                parts: [false; 2],
            };
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "format" => top.format = Some(map.next_value()?),
                    "version" => top.version = Some(map.next_value()?),
                    name => match PARTS.iter().position(|(p, _)| *p == name) {
                        Some(part) if !top.parts[part] => {
                            top.parts[part] = true;
                            map.next_value_seed(Part {
                                builder: Builder::new(part, self.limit, self.dry_run),
                                emit: &mut *self.emit,
                                failed: &mut *self.failed,
                            })?;
                        }
                        Some(_) => return Err(de::Error::custom(format!("the part {name:?} is there twice"))),
                        None => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                    },
                }
            }
            Ok(top)
        }
    }

    /// The lists of a piece being filled.
    struct Builder {
        part: usize,
        limit: usize,
        dry_run: bool,
        /// Per list: its elements as JSON, comma-separated.
        lists: Vec<Vec<u8>>,
        items: usize,
        bytes: usize,
    }

    impl Builder {
        fn new(part: usize, limit: usize, dry_run: bool) -> Builder {
            Builder {
                part,
                limit,
                dry_run,
                lists: PARTS[part].1.iter().map(|_| Vec::new()).collect(),
                items: 0,
                bytes: 0,
            }
        }

        /// The piece so far, with `head` (the part's other fields) or the service's format.
        fn take(&mut self, head: Option<&Map<String, Value>>) -> Result<Piece, String> {
            let mut body = b"{".to_vec();
            let field = |body: &mut Vec<u8>, k: &str, v: &[u8]| {
                if body.len() > 1 {
                    body.push(b',');
                }
                body.extend_from_slice(&serde_json::to_vec(k).unwrap_or_default());
                body.push(b':');
                body.extend_from_slice(v);
            };
            match head {
                Some(head) => {
                    for (k, v) in head {
                        let v = serde_json::to_vec(v).map_err(|e| e.to_string())?;
                        field(&mut body, k, &v);
                    }
                }
                None => {
                    let format = [INBOX_FORMAT, SCHEDULER_FORMAT][self.part];
                    field(&mut body, "format", &serde_json::to_vec(format).unwrap_or_default());
                    field(&mut body, "version", VERSION.to_string().as_bytes());
                }
            }
            if self.dry_run {
                field(&mut body, "dry-run", b"true");
            }
            for (name, list) in PARTS[self.part].1.iter().zip(&mut self.lists) {
                let mut v = b"[".to_vec();
                v.append(list);
                v.push(b']');
                field(&mut body, name, &v);
            }
            body.push(b'}');
            let piece = Piece {
                part: self.part,
                body,
                items: self.items,
            };
            self.items = 0;
            self.bytes = 0;
            Ok(piece)
        }
    }

    struct Part<'a, 'b> {
        builder: Builder,
        emit: &'a mut (dyn FnMut(Piece) -> Result<(), String> + 'b),
        failed: &'a mut Option<String>,
    }

    impl<'de> DeserializeSeed<'de> for Part<'_, '_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_map(self)
        }
    }

    impl<'de> Visitor<'de> for Part<'_, '_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "the {} part as a JSON object", PARTS[self.builder.part].0)
        }

        fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
            let mut head = Map::new();
            while let Some(key) = map.next_key::<String>()? {
                match PARTS[self.builder.part].1.iter().position(|l| *l == key) {
                    Some(list) => map.next_value_seed(List { list, part: &mut self })?,
                    None => {
                        head.insert(key, map.next_value()?);
                    }
                }
            }
            let last = self.builder.take(Some(&head)).map_err(de::Error::custom)?;
            self.send(last)
        }
    }

    impl Part<'_, '_> {
        fn send<E: de::Error>(&mut self, piece: Piece) -> Result<(), E> {
            (self.emit)(piece).map_err(|e| {
                *self.failed = Some(e);
                E::custom("stopped")
            })
        }
    }

    struct List<'p, 'a, 'b> {
        list: usize,
        part: &'p mut Part<'a, 'b>,
    }

    impl<'de> DeserializeSeed<'de> for List<'_, '_, '_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de> Visitor<'de> for List<'_, '_, '_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "{:?} as a list", PARTS[self.part.builder.part].1[self.list])
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while let Some(element) = seq.next_element::<Value>()? {
                let text = serde_json::to_vec(&element).map_err(de::Error::custom)?;
                drop(element);
                let b = &mut self.part.builder;
                if b.bytes > 0 && b.bytes + text.len() > b.limit {
                    let piece = b.take(None).map_err(de::Error::custom)?;
                    self.part.send(piece)?;
                }
                let b = &mut self.part.builder;
                let list = &mut b.lists[self.list];
                if !list.is_empty() {
                    list.push(b',');
                }
                list.extend_from_slice(&text);
                b.bytes += text.len() + 1;
                b.items += 1;
            }
            Ok(())
        }
    }
}

/// The pieces of `path`, cut in a blocking thread while the caller sends them (at most one
/// piece waits, so the client holds two pieces at most).
fn pieces(path: &Path, dry_run: bool) -> (mpsc::Receiver<Piece>, tokio::task::JoinHandle<Result<(), ClientError>>) {
    let (tx, rx) = mpsc::channel(1);
    let path = path.to_path_buf();
    let cutting = tokio::task::spawn_blocking(move || {
        cut(&path, PIECE_BYTES, dry_run, &mut |piece| {
            tx.blocking_send(piece).map_err(|_| "stopped".to_owned())
        })
    });
    (rx, cutting)
}

/// Adds a piece's answer to the totals: numbers are summed, lists appended.
fn add_up(totals: &mut Map<String, Value>, service: &str, answer: &Value) {
    for (k, v) in answer.as_object().into_iter().flatten() {
        let key = format!("{service}-{k}");
        match (totals.get_mut(&key), v) {
            (Some(Value::Number(a)), Value::Number(b)) => {
                let sum = a.as_u64().unwrap_or(0) + b.as_u64().unwrap_or(0);
                totals.insert(key, json!(sum));
            }
            (Some(Value::Array(a)), Value::Array(b)) => a.extend(b.iter().cloned()),
            (Some(Value::Bool(a)), Value::Bool(b)) => *a |= *b,
            _ => {
                totals.insert(key, v.clone());
            }
        }
    }
}

pub async fn import(args: ImportArgs) -> Result<(), ClientError> {
    let client = Client::open(&args.opts)?;
    let services = [&client.inbox, &client.scheduler];
    let file = args.file.display().to_string();
    // 1. every piece is checked (rules, ownership of every id, the item limit per piece)
    // before anything is stored
    let mut planned = [0usize; 2];
    // per part: what the pieces checked so far bring that is new and limited (inbox items,
    // scheduled items), counted against the free item limit with each next piece
    let mut new_before = [0u64; 2];
    let (mut rx, cutting) = pieces(&args.file, true);
    let mut refused = None;
    while let Some(piece) = rx.recv().await {
        planned[piece.part] += 1;
        let service = services[piece.part];
        let mut body = format!("{{\"new-before\":{},", new_before[piece.part]).into_bytes();
        body.extend_from_slice(piece.body.get(1..).unwrap_or_default());
        let answer = service.post_bytes_within("/account/import", body, IMPORT_LIMIT).await?;
        if answer.status.is_success() {
            let counted = ["items-new", "scheduled-new"][piece.part];
            new_before[piece.part] += answer.json()?[counted].as_u64().unwrap_or(0);
        } else {
            refused = Some(format!(
                "{file}: the {} service refused piece {} of its part: {}; nothing was imported",
                service.name,
                planned[piece.part],
                answer.reason()
            ));
            break;
        }
    }
    drop(rx);
    let cut = cutting.await.map_err(|e| ClientError::local(e.to_string()))?;
    if let Some(refused) = refused {
        return Err(ClientError::answer(refused));
    }
    cut.map_err(|e| e.noted("nothing was imported"))?;
    // 2. the same pieces, stored
    let mut totals: Map<String, Value> = Map::new();
    let mut stored = [(0usize, 0usize); 2];
    let (mut rx, cutting) = pieces(&args.file, false);
    let mut failed = None;
    while let Some(piece) = rx.recv().await {
        let service = services[piece.part];
        let number = stored[piece.part].0 + 1;
        let items = piece.items;
        let answer = match service
            .post_bytes_within("/account/import", piece.body, IMPORT_LIMIT)
            .await
        {
            Ok(a) if a.status.is_success() => a.json(),
            Ok(a) => Err(ClientError::answer(a.reason())),
            Err(e) => Err(e),
        };
        match answer {
            Ok(answer) => {
                add_up(&mut totals, service.name, &answer);
                stored[piece.part].0 += 1;
                stored[piece.part].1 += items;
            }
            Err(e) => {
                failed = Some((piece.part, number, e));
                break;
            }
        }
    }
    drop(rx);
    let cut = cutting.await.map_err(|e| ClientError::local(e.to_string()))?;
    if let Some((part, number, reason)) = failed {
        let done = |i: usize| {
            format!(
                "{} of {} {} pieces ({} entries: {} new)",
                stored[i].0,
                planned[i],
                PARTS[i].0,
                stored[i].1,
                PARTS[i]
                    .1
                    .iter()
                    .map(|l| totals
                        .get(&format!("{}-{}-added", PARTS[i].0, l))
                        .and_then(Value::as_u64)
                        .unwrap_or(0))
                    .sum::<u64>()
            )
        };
        return Err(ClientError::answer(format!(
            "{file}: piece {number} of {} of the {} part failed: {reason}\n\
             stored before it: {}, {}; the pieces after it were not sent.\n\
             Importing the same file again stores the rest (what is there is kept).",
            planned[part],
            PARTS[part].0,
            done(0),
            done(1),
        )));
    }
    cut?;
    let summary = Value::Object(totals);
    if client.json {
        super::say(&summary.to_string());
    } else {
        let n = |k: &str| summary[k].as_u64().unwrap_or(0);
        super::say(&format!(
            "imported {} inbox items ({} were there), {} scheduled items ({} were there), {} triggered items, {} triggers",
            n("inbox-items-added"),
            n("inbox-items-kept"),
            n("scheduler-scheduled-added"),
            n("scheduler-scheduled-kept"),
            n("scheduler-triggered-added"),
            n("scheduler-triggers-added"),
        ));
        for (service, key) in [
            ("inbox", "inbox-access-keys-to-recreate"),
            ("scheduler", "scheduler-access-keys-to-recreate"),
        ] {
            for k in summary[key].as_array().into_iter().flatten() {
                super::say(&format!(
                    "recreate the {service} access key {} ({})",
                    k["name"], k["permissions"]
                ));
            }
        }
        for id in summary["scheduler-email-triggers-to-verify"]
            .as_array()
            .into_iter()
            .flatten()
        {
            super::say(&format!(
                "the e-mail trigger {id} needs verifying again (resend its verification e-mail)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut_file(file: &Value, limit: usize, dry_run: bool) -> Result<Vec<(usize, Value, usize)>, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("export.json");
        std::fs::write(&path, serde_json::to_vec_pretty(file).unwrap()).unwrap();
        let mut out = Vec::new();
        cut(&path, limit, dry_run, &mut |p| {
            out.push((p.part, serde_json::from_slice(&p.body).unwrap(), p.items));
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        Ok(out)
    }

    #[test]
    fn a_file_is_cut_into_pieces_that_together_hold_every_item_once() {
        let item = |n: usize| json!({"id": n, "data": "x".repeat(40)});
        let file = json!({
            "format": FILE_FORMAT, "version": VERSION,
            "inbox": {"format": "pigeonhole-inbox-export", "version": 1, "items": (100..107).map(item).collect::<Vec<_>>(), "access-keys": [7]},
            "scheduler": {
                "format": "pigeonhole-scheduler-export", "version": 1, "settings": {"s": 1}, "triggers": [item(20), item(21)], "access-keys": [3],
                "scheduled": (0..10).map(item).collect::<Vec<_>>(),
                "triggered": (10..15).map(item).collect::<Vec<_>>(),
            },
        });
        let limit = 3 * (item(0).to_string().len() + 1);
        let got = cut_file(&file, limit, false).unwrap();
        assert!(got.len() >= 8, "{got:?}");
        let mut ids = Vec::new();
        for (i, (part, p, items)) in got.iter().enumerate() {
            let lists = PARTS[*part].1;
            let elements: Vec<&Value> = lists.iter().flat_map(|l| p[*l].as_array().unwrap()).collect();
            assert_eq!(elements.len(), *items);
            assert!(elements.iter().map(|v| v.to_string().len() + 1).sum::<usize>() <= limit);
            ids.extend(elements.iter().map(|v| v["id"].as_u64().unwrap()));
            assert_eq!(p["version"], 1);
            assert!(p.get("dry-run").is_none());
            let last = got.get(i + 1).is_none_or(|(next, _, _)| next != part);
            if last {
                // the part's other fields travel with its last piece
                assert_eq!(p["access-keys"], if *part == 0 { json!([7]) } else { json!([3]) });
                if *part == 1 {
                    assert_eq!(p["settings"], json!({"s": 1}));
                }
            } else {
                assert!(p.get("settings").is_none() && p.get("access-keys").is_none(), "{p}");
            }
            assert_eq!(p["format"], file[PARTS[*part].0]["format"]);
        }
        ids.sort();
        let mut expected: Vec<u64> = (0..15).chain(20..22).chain(100..107).collect();
        expected.sort();
        assert_eq!(ids, expected);
        // a check asks for a check in every piece
        let checks = cut_file(&file, limit, true).unwrap();
        assert_eq!(checks.len(), got.len());
        assert!(checks.iter().all(|(_, p, _)| p["dry-run"] == true));
        // a small part is one piece
        assert_eq!(cut_file(&file, usize::MAX, false).unwrap().len(), 2);
    }

    #[test]
    fn a_file_that_is_not_an_export_is_refused() {
        let parts = json!({"inbox": {"items": []}, "scheduler": {}});
        let mut other = parts.clone();
        other["format"] = json!("other");
        other["version"] = json!(1);
        assert!(cut_file(&other, 100, true)
            .unwrap_err()
            .contains("not a Pigeonhole export"));
        let missing = json!({"format": FILE_FORMAT, "version": VERSION, "inbox": {"items": []}});
        assert!(cut_file(&missing, 100, true)
            .unwrap_err()
            .contains("no \"scheduler\" part"));
        let broken = json!({"format": FILE_FORMAT, "version": VERSION, "inbox": {"items": 3}, "scheduler": {}});
        assert!(cut_file(&broken, 100, true).is_err());
    }
}
