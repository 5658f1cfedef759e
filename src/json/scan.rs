//! The raw-bytes scanner: an object's metadata, fingerprint and shippable bytes read from
//! the API server's JSON in one validating pass, without building a tree.
//!
//! The fingerprint is the tree path's (`json::Fingerprinter`): the xxh3-128 of the JSON with
//! the ignored object members left out. On bytes that serde_json's compact writer produced,
//! the two are equal (property-tested below); on other bytes (whitespace, Go's `\u003c`
//! escapes, Go's member order) the scanner hashes the bytes as they are.

use std::borrow::Cow;
use std::ops::Range;

use xxhash_rust::xxh3::Xxh3Default;

/// The member no shipped object carries: cut out of the bytes by its span.
pub const MANAGED_FIELDS: &str = "/metadata/managedFields";

/// Fields that never make an update worth shipping on their own: left out of every
/// fingerprint, whatever `ignore_fields` adds.
pub const ALWAYS_IGNORED: [&str; 2] = ["/metadata/resourceVersion", MANAGED_FIELDS];

/// serde_json's recursion limit: deeper input is refused instead of overflowing the stack.
const MAX_DEPTH: usize = 128;

/// The pointers alive on a path are one `u64` mask.
const MAX_POINTERS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    #[error("invalid JSON at byte {at}: {what}")]
    Invalid { at: usize, what: &'static str },
    #[error("invalid JSON at byte {at}: nested deeper than {MAX_DEPTH} levels")]
    TooDeep { at: usize },
    #[error("{field} is {found}, expected {expected}")]
    WrongType { field: &'static str, found: &'static str, expected: &'static str },
    #[error("{member} appears twice at byte {at}; a member name may appear once per object")]
    Duplicate { member: String, at: usize },
    #[error("`{pointer}` is not a JSON pointer: start it with `/`, e.g. /metadata/labels")]
    NotAPointer { pointer: String },
    #[error("{count} distinct JSON pointers to scan for; at most {MAX_POINTERS} are supported")]
    TooManyPointers { count: usize },
}

/// The metadata every stage reads: absent or `null` is None; strings unescaped, borrowed
/// from the input when they hold no escape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta<'a> {
    pub kind: Option<Cow<'a, str>>,
    pub api_version: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    pub namespace: Option<Cow<'a, str>>,
    pub uid: Option<Cow<'a, str>>,
    pub resource_version: Option<Cow<'a, str>>,
    pub generation: Option<i64>,
}

/// Where the value at a pointer is: its bytes, and when it is an object member, the
/// member's own bytes and the commas beside it (what removing it must take along).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub value: Range<usize>,
    pub member: Option<Member>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// The opening quote of the member's name.
    pub start: usize,
    /// The comma before the member (None: the first member).
    pub comma_before: Option<usize>,
    /// The comma after the member's value (None: the last member).
    pub comma_after: Option<usize>,
}

/// Scans objects for a fixed set of JSON pointers (RFC 6901).
#[derive(Debug, Clone)]
pub struct Scanner {
    pointers: Vec<Pointer>,
    /// Bit i: `pointers[i]` is left out of the fingerprint.
    ignored: u64,
    managed_fields: usize,
    /// The `paths` given to `new`, as indices into `pointers`.
    paths: Vec<usize>,
}

#[derive(Debug, Clone)]
struct Pointer {
    text: String,
    tokens: Vec<Token>,
}

#[derive(Debug, Clone)]
struct Token {
    key: String,
    /// The token as an array index, as serde_json's `pointer` reads it.
    index: Option<usize>,
}

/// One object scanned: its metadata and where the pointers' values are.
#[derive(Debug, Clone)]
pub struct Scanned<'s, 'a> {
    json: &'a [u8],
    /// Where the object's opening brace is.
    open: usize,
    scanner: &'s Scanner,
    pub meta: Meta<'a>,
    found: Vec<Option<Found>>,
}

impl Scanner {
    /// `ignored`: the pointers the fingerprint leaves out (all of them: `change`'s are
    /// resourceVersion, managedFields and the configured `ignore_fields`); `paths`: the
    /// pointers whose values are wanted (a filter's), read back by `Scanned::path`.
    pub fn new(ignored: &[String], paths: &[String]) -> Result<Scanner, ScanError> {
        let mut scanner = Scanner { pointers: Vec::new(), ignored: 0, managed_fields: 0, paths: Vec::new() };
        for p in ignored {
            let i = scanner.add(p)?;
            scanner.ignored |= 1 << i;
        }
        scanner.managed_fields = scanner.add(MANAGED_FIELDS)?;
        for p in paths {
            let i = scanner.add(p)?;
            scanner.paths.push(i);
        }
        if scanner.pointers.len() > MAX_POINTERS {
            return Err(ScanError::TooManyPointers { count: scanner.pointers.len() });
        }
        Ok(scanner)
    }

    fn add(&mut self, text: &str) -> Result<usize, ScanError> {
        if let Some(i) = self.pointers.iter().position(|p| p.text == text) {
            return Ok(i);
        }
        let rest = text.strip_prefix('/').ok_or_else(|| ScanError::NotAPointer { pointer: text.into() })?;
        let tokens = rest
            .split('/')
            .map(|t| {
                let key = t.replace("~1", "/").replace("~0", "~");
                let index = if t.starts_with('+') || (t.starts_with('0') && t.len() != 1) { None } else { t.parse().ok() };
                Token { key, index }
            })
            .collect();
        self.pointers.push(Pointer { text: text.into(), tokens });
        Ok(self.pointers.len() - 1)
    }

    /// Scans one JSON object. Invalid JSON, metadata of the wrong type, and a member on
    /// the way to a pointer or a metadata field appearing twice are errors.
    pub fn scan<'a>(&self, json: &'a [u8]) -> Result<Scanned<'_, 'a>, ScanError> {
        let text = std::str::from_utf8(json).map_err(|e| ScanError::Invalid { at: e.valid_up_to(), what: "not UTF-8" })?;
        let all = if self.pointers.len() == 64 { u64::MAX } else { (1 << self.pointers.len()) - 1 };
        let mut c = Cursor { text, json, at: 0, scanner: self, scratch: String::new(), meta: Meta::default(), found: vec![None; self.pointers.len()] };
        c.ws();
        if c.peek() != Some(b'{') {
            return Err(c.invalid("expected an object"));
        }
        let open = c.at;
        c.object(0, all, Level::Root)?;
        c.ws();
        if c.at != json.len() {
            return Err(c.invalid("unexpected characters after the object"));
        }
        Ok(Scanned { json, open, scanner: self, meta: c.meta, found: c.found })
    }
}

impl<'a> Scanned<'_, 'a> {
    /// The value at `paths[i]` of `Scanner::new`, None when absent.
    pub fn path(&self, i: usize) -> Option<&'a [u8]> {
        let found = self.found[self.scanner.paths[i]].as_ref()?;
        Some(&self.json[found.value.clone()])
    }

    /// Where the value at `paths[i]` of `Scanner::new` is.
    pub fn found(&self, i: usize) -> Option<&Found> {
        self.found[self.scanner.paths[i]].as_ref()
    }

    /// The xxh3-128 of the object's bytes (with `type_meta`, see `shipped`) without the
    /// ignored members (commas kept valid).
    pub fn fingerprint(&self, type_meta: &[u8]) -> u128 {
        let mut hasher = Xxh3Default::new();
        for piece in self.pieces(type_meta, self.scanner.ignored) {
            hasher.update(piece);
        }
        hasher.digest128()
    }

    /// The object's bytes to ship: with `type_meta` in place of the opening brace when it
    /// is not empty (the brace and the `kind` and `apiVersion` members a list item lacks,
    /// each followed by a comma, e.g. `{"kind":"ConfigMap","apiVersion":"v1",`; the object
    /// must have a member), and without `metadata.managedFields` when `cut_managed_fields`.
    /// The input itself when neither changes it.
    pub fn shipped(&self, type_meta: &[u8], cut_managed_fields: bool) -> Cow<'a, [u8]> {
        let mask = if cut_managed_fields { 1 << self.scanner.managed_fields } else { 0 };
        let pieces = self.pieces(type_meta, mask);
        if pieces.len() == 1 && type_meta.is_empty() {
            return Cow::Borrowed(self.json);
        }
        let mut out = Vec::with_capacity(pieces.iter().map(|p| p.len()).sum());
        for piece in pieces {
            out.extend_from_slice(piece);
        }
        Cow::Owned(out)
    }

    /// The bytes of the object with `type_meta` (if any) in place of its opening brace and
    /// the members at the pointers of `mask` removed, as slices in order.
    fn pieces<'p>(&self, type_meta: &'p [u8], mask: u64) -> Vec<&'p [u8]>
    where
        'a: 'p,
    {
        let mut pieces = Vec::with_capacity(4);
        let mut at = 0;
        if !type_meta.is_empty() {
            pieces.push(type_meta);
            at = self.open + 1;
        }
        for cut in self.removed(mask) {
            pieces.push(&self.json[at..cut.start]);
            at = cut.end;
        }
        pieces.push(&self.json[at..]);
        pieces
    }

    /// The byte ranges to leave out to remove the object members found at the pointers of
    /// `mask`, in order and disjoint. Each takes one comma along: the one after it when a
    /// kept member follows, else the one before it (if any), so that what remains is the
    /// same JSON without those members.
    fn removed(&self, mask: u64) -> Vec<Range<usize>> {
        let members: Vec<(Member, usize)> = bits(mask).filter_map(|i| self.found[i].as_ref()).filter_map(|f| f.member.map(|m| (m, f.value.end))).collect();
        let removed_after = |comma: usize| members.iter().find(|(m, _)| m.comma_before == Some(comma));
        let mut cuts: Vec<Range<usize>> = members
            .iter()
            .map(|&(m, end)| {
                // Follow the removed members after this one: is a kept member among them?
                let mut next = m.comma_after;
                while let Some(comma) = next {
                    match removed_after(comma) {
                        Some((r, _)) => next = r.comma_after,
                        None => break,
                    }
                }
                match (next, m.comma_after) {
                    (Some(_), Some(after)) => m.start..after + 1,
                    _ => m.comma_before.unwrap_or(m.start)..end,
                }
            })
            .collect();
        cuts.sort_by_key(|c| c.start);
        // A member removed inside another removed member is already gone.
        cuts.dedup_by(|inner, outer| inner.start < outer.end);
        cuts
    }
}

/// The indices of the bits set in `mask`.
fn bits(mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        let i = mask.trailing_zeros() as usize;
        mask &= mask.wrapping_sub(1);
        (i < 64).then_some(i)
    })
}

/// Which metadata an object's members can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Metadata,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Kind,
    ApiVersion,
    Metadata,
    Name,
    Namespace,
    Uid,
    ResourceVersion,
    Generation,
}

impl Field {
    fn of(level: Level, key: &[u8]) -> Option<Field> {
        Some(match (level, key) {
            (Level::Root, b"kind") => Field::Kind,
            (Level::Root, b"apiVersion") => Field::ApiVersion,
            (Level::Root, b"metadata") => Field::Metadata,
            (Level::Metadata, b"name") => Field::Name,
            (Level::Metadata, b"namespace") => Field::Namespace,
            (Level::Metadata, b"uid") => Field::Uid,
            (Level::Metadata, b"resourceVersion") => Field::ResourceVersion,
            (Level::Metadata, b"generation") => Field::Generation,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Field::Kind => "kind",
            Field::ApiVersion => "apiVersion",
            Field::Metadata => "metadata",
            Field::Name => "metadata.name",
            Field::Namespace => "metadata.namespace",
            Field::Uid => "metadata.uid",
            Field::ResourceVersion => "metadata.resourceVersion",
            Field::Generation => "metadata.generation",
        }
    }
}

/// The scan's position and what it found so far.
struct Cursor<'s, 'a> {
    text: &'a str,
    json: &'a [u8],
    at: usize,
    scanner: &'s Scanner,
    /// The last string unescaped (reused: no allocation per escaped key).
    scratch: String,
    meta: Meta<'a>,
    found: Vec<Option<Found>>,
}

impl<'a> Cursor<'_, 'a> {
    fn peek(&self) -> Option<u8> {
        self.json.get(self.at).copied()
    }

    fn invalid(&self, what: &'static str) -> ScanError {
        ScanError::Invalid { at: self.at, what }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// Any value; `depth` is the pointer token its members would match, `alive` the
    /// pointers that reach below it.
    fn value(&mut self, depth: usize, alive: u64) -> Result<(), ScanError> {
        match self.peek() {
            Some(b'{') => self.object(depth, alive, Level::Other),
            Some(b'[') => self.array(depth, alive),
            Some(b'"') => self.string(false).map(drop),
            Some(b'-' | b'0'..=b'9') => self.number().map(drop),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            _ => Err(self.invalid("expected a value")),
        }
    }

    fn literal(&mut self, word: &'static [u8]) -> Result<(), ScanError> {
        if !self.json[self.at..].starts_with(word) {
            return Err(self.invalid("expected true, false or null"));
        }
        self.at += word.len();
        Ok(())
    }

    /// Enters the container at the cursor: false when it is empty (and already left).
    fn open(&mut self, depth: usize, close: u8) -> Result<bool, ScanError> {
        if depth >= MAX_DEPTH {
            return Err(ScanError::TooDeep { at: self.at });
        }
        self.at += 1;
        self.ws();
        let empty = self.peek() == Some(close);
        if empty {
            self.at += 1;
        }
        Ok(!empty)
    }

    /// After a container's item: true at a comma (passed), false at `close` (passed).
    fn more(&mut self, close: u8, what: &'static str) -> Result<bool, ScanError> {
        match self.peek() {
            Some(b',') => {
                self.at += 1;
                self.ws();
                Ok(true)
            }
            Some(c) if c == close => {
                self.at += 1;
                Ok(false)
            }
            _ => Err(self.invalid(what)),
        }
    }

    fn object(&mut self, depth: usize, alive: u64, level: Level) -> Result<(), ScanError> {
        if !self.open(depth, b'}')? {
            return Ok(());
        }
        let (mut seen, mut seen_fields) = (0u64, 0u8);
        let mut comma_before = None;
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.invalid("expected a member name in quotes"));
            }
            let start = self.at;
            let track = alive != 0 || level != Level::Other;
            let (key, escaped) = self.string(track)?;
            let (mut here, mut below, mut field) = (0u64, 0u64, None);
            if track {
                let key = if escaped { self.scratch.as_bytes() } else { &self.json[key] };
                for i in bits(alive) {
                    let tokens = &self.scanner.pointers[i].tokens;
                    if tokens[depth].key.as_bytes() == key {
                        if tokens.len() == depth + 1 { here |= 1 << i } else { below |= 1 << i }
                    }
                }
                field = Field::of(level, key);
            }
            if let Some(i) = bits((here | below) & seen).next() {
                // The pointer's tokens down to this member, escaped as it was given.
                let member = self.scanner.pointers[i].text.split('/').take(depth + 2).collect::<Vec<_>>().join("/");
                return Err(ScanError::Duplicate { member, at: start });
            }
            seen |= here | below;
            if let Some(f) = field {
                if seen_fields & (1 << f as u8) != 0 {
                    return Err(ScanError::Duplicate { member: f.name().into(), at: start });
                }
                seen_fields |= 1 << f as u8;
            }
            self.ws();
            if self.peek() != Some(b':') {
                return Err(self.invalid("expected `:` after a member name"));
            }
            self.at += 1;
            self.ws();
            let value_start = self.at;
            match field {
                Some(f) => self.field(f, depth + 1, below)?,
                None => self.value(depth + 1, below)?,
            }
            let value_end = self.at;
            self.ws();
            let comma_after = (self.peek() == Some(b',')).then_some(self.at);
            for i in bits(here) {
                self.found[i] = Some(Found { value: value_start..value_end, member: Some(Member { start, comma_before, comma_after }) });
            }
            if !self.more(b'}', "expected `,` or `}` after an object member")? {
                return Ok(());
            }
            comma_before = comma_after;
        }
    }

    fn array(&mut self, depth: usize, alive: u64) -> Result<(), ScanError> {
        if !self.open(depth, b']')? {
            return Ok(());
        }
        let mut index = 0;
        loop {
            let (mut here, mut below) = (0u64, 0u64);
            for i in bits(alive) {
                let tokens = &self.scanner.pointers[i].tokens;
                if tokens[depth].index == Some(index) {
                    if tokens.len() == depth + 1 { here |= 1 << i } else { below |= 1 << i }
                }
            }
            let value_start = self.at;
            self.value(depth + 1, below)?;
            for i in bits(here) {
                self.found[i] = Some(Found { value: value_start..self.at, member: None });
            }
            self.ws();
            if !self.more(b']', "expected `,` or `]` after an array item")? {
                return Ok(());
            }
            index += 1;
        }
    }

    /// The value of a metadata member, read into `meta`.
    fn field(&mut self, field: Field, depth: usize, below: u64) -> Result<(), ScanError> {
        let wrong = |found, expected| ScanError::WrongType { field: field.name(), found, expected };
        let found = match self.peek() {
            Some(b'n') => return self.literal(b"null"),
            Some(b'{') if field == Field::Metadata => return self.object(depth, below, Level::Metadata),
            Some(b'"') if !matches!(field, Field::Metadata | Field::Generation) => {
                let (range, escaped) = self.string(true)?;
                let s = if escaped { Cow::Owned(self.scratch.clone()) } else { Cow::Borrowed(&self.text[range]) };
                let slot = match field {
                    Field::Kind => &mut self.meta.kind,
                    Field::ApiVersion => &mut self.meta.api_version,
                    Field::Name => &mut self.meta.name,
                    Field::Namespace => &mut self.meta.namespace,
                    Field::Uid => &mut self.meta.uid,
                    _ => &mut self.meta.resource_version,
                };
                *slot = Some(s);
                return Ok(());
            }
            Some(b'-' | b'0'..=b'9') if field == Field::Generation => {
                let range = self.number()?;
                let n = self.text[range].parse().map_err(|_| wrong("a number that is not a 64-bit integer", "an integer"))?;
                self.meta.generation = Some(n);
                return Ok(());
            }
            Some(b'{') => "an object",
            Some(b'[') => "an array",
            Some(b'"') => "a string",
            Some(b't' | b'f') => "a boolean",
            Some(b'-' | b'0'..=b'9') => "a number",
            _ => return Err(self.invalid("expected a value")),
        };
        let expected = match field {
            Field::Metadata => "an object",
            Field::Generation => "an integer",
            _ => "a string",
        };
        Err(wrong(found, expected))
    }

    /// A string at the cursor: the range of its raw content and whether it holds escapes.
    /// With `unescape`, an escaped string's content is left unescaped in `scratch`.
    fn string(&mut self, unescape: bool) -> Result<(Range<usize>, bool), ScanError> {
        let start = self.at + 1;
        let (mut i, mut segment, mut escaped) = (start, start, false);
        if unescape {
            self.scratch.clear();
        }
        loop {
            i = plain_run(self.json, i);
            match self.json.get(i) {
                Some(b'"') => {
                    if unescape && escaped {
                        self.scratch.push_str(&self.text[segment..i]);
                    }
                    self.at = i + 1;
                    return Ok((start..i, escaped));
                }
                Some(b'\\') => {
                    if unescape {
                        self.scratch.push_str(&self.text[segment..i]);
                    }
                    escaped = true;
                    let (c, len) = self.escape(i)?;
                    if unescape {
                        self.scratch.push(c);
                    }
                    i += len;
                    segment = i;
                }
                Some(_) => return Err(ScanError::Invalid { at: i, what: "a control character in a string must be escaped" }),
                None => return Err(ScanError::Invalid { at: i, what: "unterminated string" }),
            }
        }
    }

    /// The escape at `at` (a backslash): its character and length in bytes.
    fn escape(&self, at: usize) -> Result<(char, usize), ScanError> {
        let bad = |what| ScanError::Invalid { at, what };
        let c = match self.json.get(at + 1) {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                let high = self.hex4(at + 2).ok_or_else(|| bad("expected 4 hex digits after \\u"))?;
                if (0xDC00..0xE000).contains(&high) {
                    return Err(bad("a lone trailing surrogate in a \\u escape"));
                }
                if !(0xD800..0xDC00).contains(&high) {
                    return Ok((char::from_u32(high).ok_or_else(|| bad("not a character"))?, 6));
                }
                let low = match self.json.get(at + 6..at + 8) {
                    Some(b"\\u") => self.hex4(at + 8).filter(|low| (0xDC00..0xE000).contains(low)),
                    _ => None,
                };
                let low = low.ok_or_else(|| bad("a lone leading surrogate in a \\u escape"))?;
                let c = char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)).ok_or_else(|| bad("not a character"))?;
                return Ok((c, 12));
            }
            _ => return Err(bad("an unknown escape in a string")),
        };
        Ok((c, 2))
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        let digits = self.json.get(at..at + 4)?;
        digits.iter().try_fold(0, |n, &d| Some(n * 16 + (d as char).to_digit(16)?))
    }

    /// A number at the cursor (JSON's grammar: no leading zero, no bare `.` or `e`).
    fn number(&mut self) -> Result<Range<usize>, ScanError> {
        let start = self.at;
        let json = self.json;
        let digits = |i: &mut usize| {
            let from = *i;
            while let Some(b'0'..=b'9') = json.get(*i) {
                *i += 1;
            }
            *i > from
        };
        let mut i = start + usize::from(json[start] == b'-');
        match json.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                digits(&mut i);
            }
            _ => return Err(ScanError::Invalid { at: i, what: "expected a digit" }),
        }
        if json.get(i) == Some(&b'.') {
            i += 1;
            if !digits(&mut i) {
                return Err(ScanError::Invalid { at: i, what: "expected a digit after `.`" });
            }
        }
        if let Some(b'e' | b'E') = json.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = json.get(i) {
                i += 1;
            }
            if !digits(&mut i) {
                return Err(ScanError::Invalid { at: i, what: "expected a digit in the exponent" });
            }
        }
        self.at = i;
        Ok(start..i)
    }
}

/// Where the run of plain string content from `at` ends (most of an object's bytes are
/// inside strings): sixteen bytes at a time where SSE2 is there (every x86_64), then eight
/// at a time, the first special byte of a block found from its mask; the last few bytes
/// one by one.
fn plain_run(json: &[u8], mut at: usize) -> usize {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    while let Some(block) = json.get(at..at + 16) {
        // SAFETY: SSE2 is enabled for this build (`cfg` above; every x86_64 target has it).
        #[allow(unsafe_code)]
        let special = unsafe { sse2::special(block) };
        if special != 0 {
            return at + special.trailing_zeros() as usize;
        }
        at += 16;
    }
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // The high bit of each byte of `v` that is zero. A borrow may set it in a byte above a
    // zero byte too, never below one: the lowest bit set is exact.
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    while let Some(Ok(chunk)) = json.get(at..at + 8).map(<[u8; 8]>::try_from) {
        let w = u64::from_le_bytes(chunk);
        let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGHS;
        let special = zero(w ^ (ONES * b'"' as u64)) | zero(w ^ (ONES * b'\\' as u64)) | below_space;
        if special != 0 {
            return at + (special.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while at < json.len() && !SPECIAL[json[at] as usize] {
        at += 1;
    }
    at
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod sse2 {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set_epi64x, _mm_set1_epi8};

    /// Bit i set: byte i of the 16 is special (a quote, a backslash, a control character).
    #[target_feature(enable = "sse2")]
    pub fn special(block: &[u8]) -> u32 {
        let half = |i: usize| i64::from_le_bytes(block[i..i + 8].try_into().expect("eight bytes"));
        let v = _mm_set_epi64x(half(8), half(0));
        let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        // Unsigned v <= 0x1f: the smaller of the two is v itself.
        let control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
        _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control)) as u32
    }
}

/// The bytes that end a run of plain string content: a quote, a backslash, a control
/// character (JSON requires it escaped).
static SPECIAL: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    use super::*;
    use crate::json::strategies::{any_json, key, text};
    use crate::json::{ALWAYS_IGNORED as ALWAYS, Fingerprinter};

    const EXTRA: [&str; 6] = ["/status", "/metadata/annotations/a~1b", "/spec/list/1/x", "/spec/0", "/a", "/nothing/here"];
    const PATHS: [&str; 4] = ["/spec/list/1", "/metadata/generation", "/a/0", "/~0x/a~1b"];

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    fn scanner() -> Scanner {
        Scanner::new(&strings(&[&ALWAYS[..], &EXTRA[..]].concat()), &strings(&PATHS)).unwrap()
    }

    fn without_managed_fields(value: &Value) -> Value {
        let mut v = value.clone();
        if let Some(Value::Object(m)) = v.get_mut("metadata") {
            m.shift_remove("managedFields");
        }
        v
    }

    /// Checks every output of the scan of `value`, written as the API server writes JSON,
    /// against the tree path.
    fn agrees_with_the_tree(value: &Value) {
        let json = Fingerprinter::new(&[]).serialize(value).json;
        let s = scanner();
        let scanned = s.scan(&json).unwrap();
        let tree = Fingerprinter::new(&strings(&EXTRA)).serialize(value);
        assert_eq!(scanned.fingerprint(b""), tree.fingerprint, "{value}");
        assert_eq!(&scanned.shipped(b"", false)[..], &json[..], "nothing cut: the input itself");
        let cut = scanned.shipped(b"", true);
        assert_eq!(&cut[..], &Fingerprinter::new(&[]).serialize(&without_managed_fields(value)).json[..], "{value}");
        for (i, p) in PATHS.iter().enumerate() {
            let at = scanned.path(i).map(|b| serde_json::from_slice::<Value>(b).unwrap());
            assert_eq!(at.as_ref(), value.pointer(p), "{p}");
        }
        let meta = &scanned.meta;
        let s = |p: &str| value.pointer(p).and_then(Value::as_str);
        assert_eq!(meta.kind.as_deref(), s("/kind"));
        assert_eq!(meta.api_version.as_deref(), s("/apiVersion"));
        assert_eq!(meta.namespace.as_deref(), s("/metadata/namespace"));
        assert_eq!(meta.generation, value.pointer("/metadata/generation").and_then(Value::as_i64));
        assert_eq!(meta.name.as_deref(), s("/metadata/name"));
        assert_eq!(meta.uid.as_deref(), s("/metadata/uid"));
        assert_eq!(meta.resource_version.as_deref(), s("/metadata/resourceVersion"));
    }

    /// An object shaped like a Kubernetes one, each interesting member present or not.
    fn object() -> impl Strategy<Value = Value> {
        let meta = (
            prop::option::of(text()),
            prop::option::of(text()),
            prop::option::of(text()),
            prop::option::of(text()),
            prop::option::of(any::<i64>()),
            prop::option::of(any_json()),
            prop::option::of(prop::collection::btree_map(key(), any_json(), 0..4)),
        );
        (meta, prop::collection::btree_map(key(), any_json(), 0..4), prop::option::of(text()), prop::option::of(any_json())).prop_map(
            |((name, ns, uid, rv, generation, managed, annotations), members, kind, spec)| {
                let mut m = Map::new();
                let mut put = |k: &str, v: Option<Value>| {
                    if let Some(v) = v {
                        m.insert(k.into(), v);
                    }
                };
                put("name", name.map(Value::from));
                put("namespace", ns.map(Value::from));
                put("uid", uid.map(Value::from));
                put("resourceVersion", rv.map(Value::from));
                put("generation", generation.map(Value::from));
                put("managedFields", managed);
                put("annotations", annotations.map(|a| Value::Object(a.into_iter().collect())));
                let mut object: Map<String, Value> = members.into_iter().collect();
                object.insert("metadata".into(), Value::Object(m));
                if let Some(kind) = kind {
                    object.insert("kind".into(), kind.into());
                }
                if let Some(spec) = spec {
                    object.insert("spec".into(), spec);
                }
                Value::Object(object)
            },
        )
    }

    proptest! {
        /// The run ends at the first quote, backslash or control byte from `at`, as the
        /// byte-by-byte rule finds it, wherever it falls in a block (bytes over 0x7f are plain).
        #[test]
        fn a_plain_run_ends_at_the_first_special_byte(
            plain in prop::collection::vec((0x20u8..=0xff).prop_filter("plain", |b| !SPECIAL[*b as usize]), 0..48),
            special in prop::option::of(prop_oneof![Just(b'"'), Just(b'\\'), 0u8..0x20]),
            tail in prop::collection::vec(any::<u8>(), 0..20),
            at in 0usize..20,
        ) {
            let bytes: Vec<u8> = plain.into_iter().chain(special).chain(tail).collect();
            let at = at.min(bytes.len());
            let expected = bytes[at..].iter().position(|&b| SPECIAL[b as usize]).map_or(bytes.len(), |i| at + i);
            prop_assert_eq!(plain_run(&bytes, at), expected);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn the_scan_of_serde_jsons_bytes_agrees_with_the_tree(value in object()) {
            agrees_with_the_tree(&value);
        }

        #[test]
        fn broken_bytes_are_an_error_or_json_serde_json_reads_too(value in object(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
            let mut json = serde_json::to_vec(&value).unwrap();
            let i = at.index(json.len());
            json[i] = byte;
            let tree = serde_json::from_slice::<Value>(&json);
            match scanner().scan(&json) {
                Ok(scanned) => {
                    // The scanner checks numbers' grammar, not their range (serde_json refuses 1e400).
                    let out_of_range = tree.as_ref().is_err_and(|e| e.to_string().starts_with("number out of range"));
                    if !out_of_range {
                        prop_assert!(tree.is_ok(), "the scanner accepted what serde_json refuses");
                        prop_assert!(serde_json::from_slice::<Value>(&scanned.shipped(b"", true)).is_ok());
                    }
                }
                Err(ScanError::Duplicate { .. } | ScanError::WrongType { .. }) => {}
                Err(e) => prop_assert!(tree.is_err(), "refused valid JSON: {e}"),
            }
        }
    }

    #[test]
    fn ignored_members_first_last_only_and_nested_are_cut_with_their_commas() {
        for value in [
            json!({"metadata": {"managedFields": [{"a": 1}]}}),
            json!({"metadata": {"managedFields": [], "name": "n"}, "spec": 1}),
            json!({"a": 1, "metadata": {"annotations": {"a/b": 1}, "managedFields": {}, "resourceVersion": "1"}, "status": {}}),
            json!({"metadata": {"annotations": {"a/b": 1, "c": 2}, "managedFields": 1, "name": "n", "resourceVersion": "1", "uid": "u"}}),
            json!({"a": [1], "spec": [{"x": 1}, {"x": 2}], "status": null}),
            json!({"spec": {"list": [0, {"x": 1, "y": 2}]}, "status": 1}),
            json!({}),
        ] {
            agrees_with_the_tree(&value);
        }
    }

    #[test]
    fn the_pod_fixture_scans_as_its_tree_compact_or_pretty() {
        let pretty = include_bytes!("../../benches/fixtures/pod.json");
        let value: Value = serde_json::from_slice(pretty).unwrap();
        agrees_with_the_tree(&value);
        let s = scanner();
        let scanned = s.scan(pretty).unwrap();
        let cut: Value = serde_json::from_slice(&scanned.shipped(b"", true)).unwrap();
        assert_eq!(cut, without_managed_fields(&value));
        let meta = &scanned.meta;
        assert_eq!((meta.kind.as_deref(), meta.api_version.as_deref()), (Some("Pod"), Some("v1")));
        assert_eq!(meta.name.as_deref(), Some("checkout-7d9f8c6b5d-x2k9p"));
        assert_eq!(meta.namespace.as_deref(), Some("shop"));
        assert_eq!(meta.resource_version.as_deref(), Some("48213377"));
        assert!(matches!(meta.name, Some(Cow::Borrowed(_))), "no allocation for a string without escapes");
    }

    /// A ConfigMap as a kube-apiserver 1.34 sent it in a watch event, and as an item of a
    /// list response (without `kind` and `apiVersion`).
    const WATCHED: &str = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"rawprobe","uid":"2ac0b768-b853-47e3-b0b8-e333824f4c0e","resourceVersion":"662792","creationTimestamp":"2026-11-23T20:33:09Z","labels":{"x":"y"},"managedFields":[{"manager":"curl","operation":"Update","apiVersion":"v1","time":"2026-11-23T20:33:09Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:k":{}},"f:metadata":{"f:labels":{".":{},"f:x":{}}}}}]},"data":{"k":"\u003cv\u0026\u003e\u2028é"}}"#;

    #[test]
    fn a_list_item_with_its_type_put_first_is_the_watch_events_object() {
        let listed = WATCHED.replacen(r#""kind":"ConfigMap","apiVersion":"v1","#, "", 1);
        let s = scanner();
        let (watched, listed) = (s.scan(WATCHED.as_bytes()).unwrap(), s.scan(listed.as_bytes()).unwrap());
        let type_meta = br#"{"kind":"ConfigMap","apiVersion":"v1","#;
        assert_eq!(listed.meta.kind, None);
        assert_eq!(listed.shipped(type_meta, false), watched.shipped(b"", false));
        assert_eq!(&listed.shipped(type_meta, false)[..], WATCHED.as_bytes());
        assert_eq!(listed.shipped(type_meta, true), watched.shipped(b"", true));
        assert_eq!(listed.fingerprint(type_meta), watched.fingerprint(b""));
        let tree: Value = serde_json::from_str(WATCHED).unwrap();
        assert_eq!(Fingerprinter::new(&strings(&EXTRA)).serialize(&tree).fingerprint, watched.fingerprint(b""), "the tree path agrees");
        assert_eq!(&Fingerprinter::new(&[]).serialize(&without_managed_fields(&tree)).json[..], &watched.shipped(b"", true)[..]);
    }

    #[test]
    fn go_escapes_unescape_to_the_characters_serde_json_reads() {
        let json = br#"{"kind":"Pod","metadata":{"name":"a\u003cb\u003e\u0026c","namespace":"\u00e9\ud83d\ude00\u2028","uid":"\"\\\/\b\f\n\r\t","resourceVersion":"7","generation":3}}"#;
        let value: Value = serde_json::from_slice(json).unwrap();
        let scanned = scanner().scan(json).map(|s| s.meta).unwrap();
        assert_eq!(scanned.name.as_deref(), Some("a<b>&c"));
        assert_eq!(scanned.name.as_deref(), value.pointer("/metadata/name").and_then(Value::as_str));
        assert_eq!(scanned.namespace.as_deref(), value.pointer("/metadata/namespace").and_then(Value::as_str));
        assert_eq!(scanned.uid.as_deref(), value.pointer("/metadata/uid").and_then(Value::as_str));
        assert_eq!(scanned.generation, Some(3));
        // Keys are unescaped before they are matched.
        let s = scanner();
        let scanned = s.scan(br#"{"metad\u0061ta":{"n\u0061me":"x","managedFields":1}}"#).unwrap();
        assert_eq!(scanned.meta.name.as_deref(), Some("x"));
        assert_eq!(&scanned.shipped(b"", true)[..], br#"{"metad\u0061ta":{"n\u0061me":"x"}}"#);
    }

    #[test]
    fn metadata_of_the_wrong_type_is_an_error_naming_the_field() {
        let err = |json: &str| scanner().scan(json.as_bytes()).unwrap_err().to_string();
        assert_eq!(err(r#"{"metadata":{"name":1}}"#), "metadata.name is a number, expected a string");
        assert_eq!(err(r#"{"metadata":{"generation":"1"}}"#), "metadata.generation is a string, expected an integer");
        assert_eq!(err(r#"{"metadata":{"generation":1.5}}"#), "metadata.generation is a number that is not a 64-bit integer, expected an integer");
        assert_eq!(err(r#"{"metadata":[]}"#), "metadata is an array, expected an object");
        assert_eq!(err(r#"{"kind":{}}"#), "kind is an object, expected a string");
        assert_eq!(err(r#"{"metadata":{"uid":"a","uid":"b"}}"#), "metadata.uid appears twice at byte 23; a member name may appear once per object");
        assert_eq!(err(r#"{"spec":[],"status":1,"spec":{}}"#), "/spec appears twice at byte 22; a member name may appear once per object");
        let none = scanner().scan(br#"{"metadata":{"namespace":null}}"#).unwrap().meta;
        assert_eq!(none, Meta::default());
    }

    #[test]
    fn invalid_json_is_an_error_never_a_panic() {
        let compact = serde_json::to_vec(&serde_json::from_slice::<Value>(include_bytes!("../../benches/fixtures/pod.json")).unwrap()).unwrap();
        let s = scanner();
        for end in 0..compact.len() {
            assert!(s.scan(&compact[..end]).is_err(), "a prefix of {end} bytes");
        }
        for bad in [
            "",
            "[]",
            "{",
            "{}x",
            r#"{"a"}"#,
            r#"{"a":}"#,
            r#"{"a":1,}"#,
            r#"{"a":01}"#,
            r#"{"a":-}"#,
            r#"{"a":1.}"#,
            r#"{"a":1e}"#,
            r#"{"a":tru}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\u12"}"#,
            r#"{"a":"\ud800"}"#,
            r#"{"a":"\udc00"}"#,
            "{\"a\":\"\n\"}",
            r#"{"a":[1,]}"#,
            r#"{"a":[1 2]}"#,
            r#"{a:1}"#,
        ] {
            let e = s.scan(bad.as_bytes()).unwrap_err();
            assert!(matches!(e, ScanError::Invalid { .. }), "{bad}: {e}");
            assert!(serde_json::from_str::<Value>(bad).map(|v| !v.is_object()).unwrap_or(true), "{bad}");
        }
        assert_eq!(s.scan(b"{\"a\":\"\xff\"}").unwrap_err().to_string(), "invalid JSON at byte 6: not UTF-8");
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert!(matches!(s.scan(deep.as_bytes()), Err(ScanError::TooDeep { .. })));
    }

    #[test]
    fn a_pointer_must_start_with_a_slash() {
        let e = Scanner::new(&["status".into()], &[]).unwrap_err();
        assert_eq!(e.to_string(), "`status` is not a JSON pointer: start it with `/`, e.g. /metadata/labels");
    }
}
