//! The scanner behind [`super::yaml_depth`]: libyaml's, token by token, counting the collections
//! open at each token (see the parent module's documentation).

/// YAML 1.1's printable characters, as libyaml's reader checks them.
pub(super) fn printable(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | ' '..='~' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
        || c >= '\u{10000}'
}

/// A possible simple key: where a token that may turn out to be a mapping key started.
#[derive(Debug, Clone, Copy, Default)]
struct SimpleKey {
    possible: bool,
    /// In block context at the current indentation: a `:` must follow on the same line.
    required: bool,
    index: usize,
    line: u64,
    column: i64,
    /// The deepest the text went since the key started: all of it is inside the mapping the
    /// key opens, if it does.
    region_max: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sequence,
    Mapping,
}

/// A block collection: libyaml's indentation stack.
#[derive(Debug, Clone, Copy)]
struct Block {
    /// The indentation outside it.
    outer: i64,
    kind: Kind,
    /// A mapping whose value is an indentless sequence (`key:` then `- item` at the key's
    /// column): one more level, with no indentation of its own.
    indentless: bool,
}

/// A flow collection.
#[derive(Debug, Clone, Copy)]
struct Flow {
    kind: Kind,
    /// A flow sequence holding a one-pair mapping (`[a: b]`) at the moment.
    pair: bool,
    /// The deepest the text went inside this collection.
    inner_max: usize,
}

pub(super) struct Scanner<'a> {
    b: &'a [u8],
    /// Byte offset, and the 0-based line and column (in characters) of the next character.
    i: usize,
    line: u64,
    column: i64,
    limit: usize,
    depth: usize,
    pub(super) max: usize,
    pub(super) first_over: Option<(u64, u64)>,
    pub(super) error: Option<(u64, u64)>,
    /// The current indentation (−1 before any block collection) and the block collections.
    indent: i64,
    blocks: Vec<Block>,
    flows: Vec<Flow>,
    /// One possible simple key per flow level, the block level's first.
    keys: Vec<SimpleKey>,
    key_allowed: bool,
}

impl<'a> Scanner<'a> {
    pub(super) fn new(b: &'a [u8], limit: usize) -> Self {
        Scanner {
            b,
            i: 0,
            line: 0,
            column: 0,
            limit,
            depth: 0,
            max: 0,
            first_over: None,
            error: None,
            indent: -1,
            blocks: Vec::new(),
            flows: Vec::new(),
            keys: vec![SimpleKey::default()],
            key_allowed: true,
        }
    }

    // -- Characters ---------------------------------------------------------------------------

    /// The byte `k` bytes ahead; 0 past the end (libyaml's end of input is a NUL).
    fn at(&self, k: usize) -> u8 {
        self.b.get(self.i + k).copied().unwrap_or(0)
    }

    fn is(&self, k: usize, c: u8) -> bool {
        self.at(k) == c
    }

    fn is_z(&self, k: usize) -> bool {
        self.at(k) == 0
    }

    fn is_blank(&self, k: usize) -> bool {
        matches!(self.at(k), b' ' | b'\t')
    }

    /// `\r`, `\n`, NEL, LS or PS.
    fn is_break(&self, k: usize) -> bool {
        match self.at(k) {
            b'\r' | b'\n' => true,
            0xC2 => self.at(k + 1) == 0x85,
            0xE2 => self.at(k + 1) == 0x80 && matches!(self.at(k + 2), 0xA8 | 0xA9),
            _ => false,
        }
    }

    fn is_breakz(&self, k: usize) -> bool {
        self.is_break(k) || self.is_z(k)
    }

    fn is_blankz(&self, k: usize) -> bool {
        self.is_blank(k) || self.is_breakz(k)
    }

    fn is_alpha(&self, k: usize) -> bool {
        matches!(self.at(k), b'0'..=b'9' | b'A'..=b'Z' | b'a'..=b'z' | b'_' | b'-')
    }

    /// A character of a tag's URI; with `flow_indicators`, `,`, `[` and `]` too.
    fn is_uri(&self, k: usize, flow_indicators: bool) -> bool {
        self.is_alpha(k)
            || matches!(
                self.at(k),
                b';' | b'/'
                    | b'?'
                    | b':'
                    | b'@'
                    | b'&'
                    | b'='
                    | b'+'
                    | b'$'
                    | b'.'
                    | b'%'
                    | b'!'
                    | b'~'
                    | b'*'
                    | b'\''
                    | b'('
                    | b')'
            )
            || flow_indicators && matches!(self.at(k), b',' | b'[' | b']')
    }

    /// `---` or `...` at the start of a line, then a blank or the end.
    fn is_document_indicator(&self) -> bool {
        self.column == 0
            && (self.b[self.i..].starts_with(b"---") || self.b[self.i..].starts_with(b"..."))
            && self.is_blankz(3)
    }

    fn skip(&mut self) {
        if self.i >= self.b.len() {
            return;
        }
        self.i += match self.b[self.i] {
            0..0x80 => 1,
            0xC0..0xE0 => 2,
            0xE0..0xF0 => 3,
            _ => 4,
        };
        self.column += 1;
    }

    fn skip_line(&mut self) {
        if self.is(0, b'\r') && self.is(1, b'\n') {
            self.i += 2;
        } else if self.is_break(0) {
            self.skip();
        } else {
            return;
        }
        self.line += 1;
        self.column = 0;
    }

    fn syntax_error(&mut self) {
        if self.error.is_none() {
            self.error = Some((self.line + 1, self.column as u64 + 1));
        }
    }

    // -- Depth --------------------------------------------------------------------------------

    /// The text reached `depth` levels (now, or in a key just found to open a mapping).
    fn reached(&mut self, depth: usize) {
        if depth > self.max {
            self.max = depth;
        }
        if depth > self.limit && self.first_over.is_none() {
            self.first_over = Some((self.line + 1, self.column as u64 + 1));
        }
        let key = self.keys.last_mut().expect("the block level's key");
        key.region_max = key.region_max.max(depth);
        if let Some(flow) = self.flows.last_mut() {
            flow.inner_max = flow.inner_max.max(depth);
        }
    }

    fn open(&mut self) {
        self.depth += 1;
        self.reached(self.depth);
    }

    /// libyaml's `roll_indent`: a block collection starts at `column` if that is deeper than the
    /// current indentation. `key_region`: the deepest a simple key it starts at went.
    fn roll(&mut self, column: i64, kind: Kind, key_region: Option<usize>) {
        if !self.flows.is_empty() {
            return;
        }
        if self.indent < column {
            self.blocks.push(Block { outer: self.indent, kind, indentless: false });
            self.indent = column;
            self.open();
            if let Some(region) = key_region {
                self.reached(region + 1);
            }
        } else if kind == Kind::Sequence
            && let Some(top) = self.blocks.last_mut()
            && top.kind == Kind::Mapping
            && !top.indentless
            && self.indent == column
        {
            top.indentless = true;
            self.open();
        }
    }

    /// libyaml's `unroll_indent`: close the block collections deeper than `column`.
    fn unroll(&mut self, column: i64) {
        if !self.flows.is_empty() {
            return;
        }
        while self.indent > column {
            let block = self.blocks.pop().expect("an indentation has its collection");
            self.depth -= 1 + usize::from(block.indentless);
            self.indent = block.outer;
        }
    }

    fn end_pair(&mut self) {
        if let Some(flow) = self.flows.last_mut()
            && flow.pair
        {
            flow.pair = false;
            self.depth -= 1;
        }
    }

    // -- Simple keys --------------------------------------------------------------------------

    fn save_key(&mut self) {
        let required = self.flows.is_empty() && self.indent == self.column;
        if self.key_allowed {
            self.remove_key();
            let key = SimpleKey {
                possible: true,
                required,
                index: self.i,
                line: self.line,
                column: self.column,
                region_max: self.depth,
            };
            *self.keys.last_mut().expect("the block level's key") = key;
        }
    }

    fn remove_key(&mut self) {
        let key = self.keys.last_mut().expect("the block level's key");
        let missing_colon = key.possible && key.required;
        key.possible = false;
        if missing_colon {
            self.syntax_error();
        }
    }

    /// libyaml's `stale_simple_keys`, for the keys that matter now: the top one, and the block
    /// level's, the only one that can be required (keys in between are checked when they are on
    /// top again; staleness only grows).
    fn stale_keys(&mut self) {
        let (line, index) = (self.line, self.i);
        let mut missing_colon = false;
        let last = self.keys.len() - 1;
        for k in [0, last] {
            let key = &mut self.keys[k];
            if key.possible && (key.line < line || key.index + 1024 < index) {
                missing_colon |= key.required;
                key.possible = false;
            }
        }
        if missing_colon {
            self.syntax_error();
        }
    }

    // -- Tokens -------------------------------------------------------------------------------

    pub(super) fn run(&mut self) {
        loop {
            self.scan_to_next_token();
            self.stale_keys();
            self.unroll(self.column);
            if self.i >= self.b.len() {
                self.unroll(-1);
                self.remove_key();
                return;
            }
            self.end_indentless();
            self.token();
        }
    }

    /// An indentless sequence ends at the first token at its mapping's column that is not `-`.
    fn end_indentless(&mut self) {
        let entry = self.is(0, b'-') && self.is_blankz(1);
        if self.flows.is_empty()
            && self.column == self.indent
            && !entry
            && let Some(top) = self.blocks.last_mut()
            && top.indentless
        {
            top.indentless = false;
            self.depth -= 1;
        }
    }

    fn scan_to_next_token(&mut self) {
        loop {
            if self.column == 0 && self.b[self.i..].starts_with("\u{feff}".as_bytes()) {
                self.skip();
            }
            while self.is(0, b' ') || (!self.flows.is_empty() || !self.key_allowed) && self.is(0, b'\t') {
                self.skip();
            }
            if self.is(0, b'#') {
                while !self.is_breakz(0) {
                    self.skip();
                }
            }
            if !self.is_break(0) {
                return;
            }
            self.skip_line();
            if self.flows.is_empty() {
                self.key_allowed = true;
            }
        }
    }

    fn token(&mut self) {
        let c = self.at(0);
        let in_flow = !self.flows.is_empty();
        if self.column == 0 && c == b'%' {
            // A directive: its line, whatever is on it, and its line break (libyaml's
            // scan_directive eats the break without allowing a key, so a tab starting the next
            // line is skipped as blank).
            self.unroll(-1);
            self.remove_key();
            self.key_allowed = false;
            while !self.is_breakz(0) {
                self.skip();
            }
            if self.is_break(0) {
                self.skip_line();
            }
        } else if self.is_document_indicator() {
            self.unroll(-1);
            self.remove_key();
            self.key_allowed = false;
            self.i += 3;
            self.column += 3;
        } else if c == b'[' || c == b'{' {
            self.save_key();
            let kind = if c == b'[' { Kind::Sequence } else { Kind::Mapping };
            self.flows.push(Flow { kind, pair: false, inner_max: 0 });
            self.keys.push(SimpleKey::default());
            self.open();
            self.key_allowed = true;
            self.skip();
        } else if c == b']' || c == b'}' {
            self.remove_key();
            if let Some(flow) = self.flows.pop() {
                self.keys.pop();
                self.depth -= 1 + usize::from(flow.pair);
                // What happened inside happened inside the enclosing key and collection too.
                let key = self.keys.last_mut().expect("the block level's key");
                key.region_max = key.region_max.max(flow.inner_max);
                if let Some(outer) = self.flows.last_mut() {
                    outer.inner_max = outer.inner_max.max(flow.inner_max);
                }
            }
            self.key_allowed = false;
            self.skip();
        } else if c == b',' {
            self.remove_key();
            self.end_pair();
            self.key_allowed = true;
            self.skip();
        } else if c == b'-' && self.is_blankz(1) {
            if !in_flow {
                if !self.key_allowed {
                    self.syntax_error();
                }
                self.roll(self.column, Kind::Sequence, None);
            }
            self.remove_key();
            self.key_allowed = true;
            self.skip();
        } else if c == b'?' && (in_flow || self.is_blankz(1)) {
            if in_flow {
                self.start_pair(None);
            } else {
                if !self.key_allowed {
                    self.syntax_error();
                }
                self.roll(self.column, Kind::Mapping, None);
            }
            self.remove_key();
            self.key_allowed = !in_flow;
            self.skip();
        } else if c == b':' && (in_flow || self.is_blankz(1)) {
            self.value();
            self.skip();
        } else if c == b'*' || c == b'&' {
            self.save_key();
            self.key_allowed = false;
            self.skip();
            let start = self.i;
            while self.is_alpha(0) {
                self.skip();
            }
            if self.i == start
                || !(self.is_blankz(0) || matches!(self.at(0), b'?' | b':' | b',' | b']' | b'}' | b'%' | b'@' | b'`'))
            {
                self.syntax_error();
            }
        } else if c == b'!' {
            self.save_key();
            self.key_allowed = false;
            self.tag();
        } else if (c == b'|' || c == b'>') && !in_flow {
            self.remove_key();
            self.key_allowed = true;
            self.block_scalar();
        } else if c == b'\'' || c == b'"' {
            self.save_key();
            self.key_allowed = false;
            self.quoted_scalar(c == b'\'');
        } else if self.plain_may_start() {
            self.save_key();
            self.key_allowed = false;
            if self.plain_scalar() {
                self.key_allowed = true;
            }
        } else {
            // "found character that cannot start any token": read it as text and go on.
            self.syntax_error();
            self.skip();
        }
    }

    /// A `:` (libyaml's `fetch_value`).
    fn value(&mut self) {
        let in_flow = !self.flows.is_empty();
        let key = *self.keys.last().expect("the block level's key");
        if key.possible {
            if in_flow {
                self.start_pair(Some(key.region_max));
            } else {
                self.roll(key.column, Kind::Mapping, Some(key.region_max));
            }
            self.keys.last_mut().expect("the block level's key").possible = false;
            self.key_allowed = false;
        } else {
            if in_flow {
                self.start_pair(None);
            } else {
                if !self.key_allowed {
                    self.syntax_error();
                }
                self.roll(self.column, Kind::Mapping, None);
            }
            self.key_allowed = !in_flow;
        }
    }

    /// A key or value inside a flow sequence makes a one-pair mapping (`[a: b]` is `[{a: b}]`).
    fn start_pair(&mut self, key_region: Option<usize>) {
        if let Some(flow) = self.flows.last_mut()
            && flow.kind == Kind::Sequence
            && !flow.pair
        {
            flow.pair = true;
            self.open();
            if let Some(region) = key_region {
                self.reached(region + 1);
            }
        }
    }

    fn tag(&mut self) {
        if self.is(1, b'<') {
            self.skip();
            self.skip();
            while self.is_uri(0, true) {
                self.skip();
            }
            if self.is(0, b'>') {
                self.skip();
            } else {
                self.syntax_error();
            }
        } else {
            // The handle (`!`, `!!` or `!name!`) and the suffix are all URI characters.
            self.skip();
            while self.is_uri(0, false) {
                self.skip();
            }
        }
        let comma_in_flow = !self.flows.is_empty() && self.is(0, b',');
        if !self.is_blankz(0) && !comma_in_flow {
            self.syntax_error();
        }
    }

    fn quoted_scalar(&mut self, single: bool) {
        let quote = if single { b'\'' } else { b'"' };
        self.skip();
        loop {
            if self.is_document_indicator() || self.is_z(0) {
                self.syntax_error();
                return;
            }
            while !self.is_blankz(0) {
                if single && self.is(0, b'\'') && self.is(1, b'\'') {
                    self.skip();
                    self.skip();
                } else if self.is(0, quote) {
                    break;
                } else if !single && self.is(0, b'\\') && self.is_break(1) {
                    self.skip();
                    self.skip_line();
                    break;
                } else if !single && self.is(0, b'\\') {
                    // An escape: the character after the backslash is never the end. (libyaml
                    // refuses unknown escapes and bad hex digits; reading on is stricter.)
                    self.skip();
                    self.skip();
                } else {
                    self.skip();
                }
            }
            if self.is(0, quote) {
                self.skip();
                return;
            }
            while self.is_blank(0) || self.is_break(0) {
                if self.is_blank(0) { self.skip() } else { self.skip_line() }
            }
        }
    }

    /// libyaml's test for the first character of a plain scalar.
    fn plain_may_start(&self) -> bool {
        let c = self.at(0);
        let indicator = self.is_blankz(0)
            || matches!(
                c,
                b'-' | b'?'
                    | b':'
                    | b','
                    | b'['
                    | b']'
                    | b'{'
                    | b'}'
                    | b'#'
                    | b'&'
                    | b'*'
                    | b'!'
                    | b'|'
                    | b'>'
                    | b'\''
                    | b'"'
                    | b'%'
                    | b'@'
                    | b'`'
            );
        !indicator
            || c == b'-' && !self.is_blank(1)
            || self.flows.is_empty() && (c == b'?' || c == b':') && !self.is_blankz(1)
    }

    /// A plain scalar; true when it ended after a line break (a simple key may follow).
    fn plain_scalar(&mut self) -> bool {
        let in_flow = !self.flows.is_empty();
        let indent = self.indent + 1;
        let mut leading_blanks = false;
        loop {
            if self.is_document_indicator() || self.is(0, b'#') {
                break;
            }
            while !self.is_blankz(0) {
                let c = self.at(0);
                if in_flow && c == b':' && matches!(self.at(1), b',' | b'?' | b'[' | b']' | b'{' | b'}') {
                    // "found unexpected ':'": read on as if the scalar ended here.
                    self.syntax_error();
                    return leading_blanks;
                }
                if c == b':' && self.is_blankz(1) || in_flow && matches!(c, b',' | b'[' | b']' | b'{' | b'}') {
                    break;
                }
                leading_blanks = false;
                self.skip();
            }
            if !(self.is_blank(0) || self.is_break(0)) {
                break;
            }
            while self.is_blank(0) || self.is_break(0) {
                if self.is_blank(0) {
                    if leading_blanks && self.column < indent && self.is(0, b'\t') {
                        self.syntax_error();
                    }
                    self.skip();
                } else {
                    self.skip_line();
                    leading_blanks = true;
                }
            }
            if !in_flow && self.column < indent {
                break;
            }
        }
        leading_blanks
    }

    fn block_scalar(&mut self) {
        self.skip();
        let mut increment = 0;
        let digit = |s: &Self| s.at(0).is_ascii_digit();
        if self.is(0, b'+') || self.is(0, b'-') {
            self.skip();
            if digit(self) {
                increment = i64::from(self.at(0) - b'0');
                self.skip();
            }
        } else if digit(self) {
            increment = i64::from(self.at(0) - b'0');
            self.skip();
            if self.is(0, b'+') || self.is(0, b'-') {
                self.skip();
            }
        }
        if increment == 0 && self.b.get(self.i.wrapping_sub(1)) == Some(&b'0') {
            self.syntax_error(); // an indentation indicator of 0
        }
        while self.is_blank(0) {
            self.skip();
        }
        if self.is(0, b'#') {
            while !self.is_breakz(0) {
                self.skip();
            }
        }
        if !self.is_breakz(0) {
            // "did not find expected comment or line break": the rest of the line is lost.
            self.syntax_error();
            while !self.is_breakz(0) {
                self.skip();
            }
        }
        self.skip_line();
        let mut indent = if increment == 0 {
            0
        } else if self.indent >= 0 {
            self.indent + increment
        } else {
            increment
        };
        self.block_scalar_breaks(&mut indent);
        while self.column == indent && !self.is_z(0) {
            while !self.is_breakz(0) {
                self.skip();
            }
            self.skip_line();
            self.block_scalar_breaks(&mut indent);
        }
    }

    /// libyaml's `scan_block_scalar_breaks`: the indentation and empty lines before a line of a
    /// block scalar, which fix the scalar's indentation when it has no indicator.
    fn block_scalar_breaks(&mut self, indent: &mut i64) {
        let mut max_indent = 0;
        loop {
            while (*indent == 0 || self.column < *indent) && self.is(0, b' ') {
                self.skip();
            }
            max_indent = max_indent.max(self.column);
            if (*indent == 0 || self.column < *indent) && self.is(0, b'\t') {
                self.syntax_error();
            }
            if !self.is_break(0) {
                break;
            }
            self.skip_line();
        }
        if *indent == 0 {
            *indent = max_indent.max(self.indent + 1).max(1);
        }
    }
}
