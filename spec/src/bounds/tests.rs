use proptest::prelude::*;
use serde_norway::Value;

use super::*;

/// How deeply a parsed value nests: collections on its deepest path (keys included).
fn value_depth(value: &Value) -> usize {
    match value {
        Value::Sequence(items) => 1 + items.iter().map(value_depth).max().unwrap_or(0),
        Value::Mapping(map) => 1 + map.iter().map(|(k, v)| value_depth(k).max(value_depth(v))).max().unwrap_or(0),
        Value::Tagged(tagged) => value_depth(&tagged.value),
        _ => 0,
    }
}

fn depth(text: &str) -> usize {
    yaml_depth(text, usize::MAX).max
}

#[track_caller]
fn assert_depth(text: &str, expected: usize) {
    let parsed: Value = serde_norway::from_str(text).unwrap_or_else(|e| panic!("{text:?} is not YAML: {e}"));
    assert_eq!(value_depth(&parsed), expected, "the parsed depth of {text:?}");
    assert_eq!(depth(text), expected, "the counted depth of {text:?}");
}

#[test]
fn the_depth_counted_is_the_parsed_depth() {
    assert_depth("", 0);
    assert_depth("a", 0);
    assert_depth("[]", 1);
    assert_depth("a: b", 1);
    assert_depth("a: [b, {c: d}]", 3);
    assert_depth("a:\n  b:\n    c: [d]\n", 4);
    assert_depth("- - - x\n", 3);
    assert_depth("- a: 1\n  b: [2]\n", 3);
    // An indentless sequence is a level of its own.
    assert_depth("a:\n- b\n- c: [d]\nz: 1\n", 4);
    // A pair in a flow sequence is a one-pair mapping, its key inside it.
    assert_depth("[a: b]", 2);
    assert_depth("[[a]: b]", 3);
    assert_depth("[? [[a]] : b]", 4);
    // A collection as a block mapping's key is inside the mapping.
    assert_depth("[[a]]: b\n", 3);
    assert_depth("? [[a]]\n: b\n", 3);
    // Brackets in scalars, comments and block scalars are text.
    assert_depth("a: 'it''s [[[ \"'\nb: \"[[\\\" {{\" # [[[\nc: x[y]{z}\n", 1);
    assert_depth("a: |\n  [[[[\n  {{{{\nb: >-\n  ]]]]\n  '\n", 1);
    // A block scalar's lines are those indented deeper than its collection, or as its indicator says.
    assert_depth("x:\n  a: |\n  b: [[c]]\n", 4);
    assert_depth("x:\n  a: |1\n   [[[\n  b: [[c]]\n", 4);
    assert_depth("- |\n [[[\n- [[c]]\n", 3);
    assert_depth("[a # ]]]]\n , [b]]", 2);
    assert_depth("%YAML 1.1\n--- [a]\n", 1);
    assert_depth("!!seq [!t [a], !<tag:x,y[]> b]", 2);
    assert_depth("\u{feff}a: [b]", 2);
}

#[test]
fn a_directive_eats_its_line_break_so_a_tab_may_start_the_next_line() {
    // Found by the syntax soup below: libyaml skips the tab as blank (no key is allowed yet).
    for text in ["#\n%YAML 1.1\n\t#\n---\n''", "%YAML 1.1\n\t# c\n--- [a]"] {
        assert!(serde_norway::from_str::<Value>(text).is_ok(), "{text:?}");
        let counted = yaml_depth(text, 64);
        assert_eq!(counted.syntax_error, None, "{text:?}");
    }
    assert_depth("%YAML 1.1\n\t# c\n--- [a]", 1);
}

#[test]
fn line_breaks_other_than_newline_end_comments_and_scalars() {
    // libyaml breaks lines at NEL, LS and PS too: what follows a comment on the same "line" is YAML.
    for brk in ["\r", "\r\n", "\u{85}", "\u{2028}", "\u{2029}"] {
        let text = format!("a: # x{brk}  [[[b]]]");
        assert_eq!(depth(&text), 4, "{text:?}");
    }
}

#[test]
fn nothing_after_a_character_the_reader_refuses_is_counted() {
    assert_eq!(depth("[a, \u{1}[[[[[[[[[[[[[[["), 1);
    assert!(serde_norway::from_str::<Value>("[a, \u{1}[[[[[[[[[[[[[[[").is_err());
}

#[test]
fn the_limit_is_reported_where_it_is_first_passed() {
    let d = yaml_depth("a:\n  - [[b]]\n", 3);
    assert_eq!((d.max, d.first_over), (4, Some((2, 6))));
    assert_eq!(yaml_depth("a:\n  - [[b]]\n", 4).first_over, None);
    let err = check_yaml(&"[".repeat(100_000), 1 << 20, 64).unwrap_err().to_string();
    assert_eq!(err, "it nests 100000 levels deep, over the limit of 64 levels (level 65 opens at line 1, column 65)");
    let err = check_yaml("abcdef", 5, 64).unwrap_err().to_string();
    assert_eq!(err, "it is 6 bytes, over the limit of 5 bytes (5 bytes)");
}

#[test]
fn sizes_are_shown_in_the_largest_whole_unit() {
    assert_eq!(show_bytes(64 << 20), "64 MiB");
    assert_eq!(show_bytes(512 << 10), "512 KiB");
    assert_eq!(show_bytes(1000), "1000 bytes");
}

#[test]
fn only_regular_files_under_the_limit_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.txt");
    std::fs::write(&file, "0123456789").unwrap();
    assert_eq!(read_text(&file, 10).unwrap(), "0123456789");
    let err = read_text(&file, 9).unwrap_err().to_string();
    assert_eq!(err, "it is 10 bytes, over the limit of 9 bytes (9 bytes)");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    assert_eq!(read_text(&link, 10).unwrap(), "0123456789", "a link to a regular file is read");
    std::fs::write(&file, [0xff, 0xfe]).unwrap();
    assert!(read_text(&file, 10).unwrap_err().to_string().contains("not UTF-8"));

    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let zero_link = dir.path().join("zero");
    std::os::unix::fs::symlink("/dev/zero", &zero_link).unwrap();
    for (path, found) in [
        (Path::new("/dev/zero"), "a character device"),
        (zero_link.as_path(), "a character device"),
        (fifo.as_path(), "a FIFO (named pipe)"),
        (dir.path(), "a directory"),
    ] {
        let err = read_bounded(path, 1 << 20).unwrap_err().to_string();
        assert_eq!(err, format!("it is {found}, not a regular file (vcurve reads only regular files)"));
    }
    let err = read_bounded(&dir.path().join("missing"), 1).unwrap_err().to_string();
    assert!(err.contains("No such file"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Properties, against serde_norway itself: on any text it parses, the depth counted is the depth
// of what it parsed; where the count sees a syntax error, serde_norway refuses the text.

/// Pieces of YAML syntax, for texts that are mostly not YAML.
const PIECES: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    ",",
    ", ",
    ":",
    ": ",
    "- ",
    "-",
    "? ",
    "?",
    "'",
    "\"",
    "''",
    "\\",
    "\\\"",
    "#",
    " #",
    "|",
    "|-",
    ">",
    ">2",
    "&a ",
    "!t ",
    "!!str ",
    "!<x> ",
    " ",
    "  ",
    "    ",
    "\t",
    "\n",
    "\n",
    "\n",
    "\r\n",
    "\u{85}",
    "\u{2028}",
    "---\n",
    "--- ",
    "...\n",
    "%YAML 1.1\n",
    "a",
    "b",
    "ab",
    "k: ",
    "é",
    "\u{feff}",
    "x y",
    "1",
];

fn soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PIECES), 0..48).prop_map(|pieces| pieces.concat())
}

/// A tree of collections and scalars, rendered as YAML in styles drawn from `style`.
#[derive(Debug, Clone)]
enum Node {
    Scalar,
    Seq(Vec<Node>),
    Map(Vec<Node>),
}

fn tree() -> impl Strategy<Value = Node> {
    Just(Node::Scalar).prop_recursive(8, 64, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Node::Seq),
            prop::collection::vec(inner, 0..4).prop_map(Node::Map),
        ]
    })
}

/// Choices drawn from a seed.
struct Style(u64);

impl Style {
    fn pick(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn scalar(&mut self, flow: bool) -> &'static str {
        const ANYWHERE: &[&str] =
            &["a", "b1", "x y", "it's", "a#b", "-x", "é", "a:b", "'q[u]o''te'", "\"d{q}\\\"x\"", "\"\\u00e9[\""];
        const BLOCK: &[&str] = &["a[b]{c}", "x, y"];
        let i = self.pick(ANYWHERE.len() + if flow { 0 } else { BLOCK.len() });
        ANYWHERE.get(i).copied().unwrap_or_else(|| BLOCK[i - ANYWHERE.len()])
    }

    fn comment(&mut self) -> &'static str {
        [" # [[{ ' \"", "", "", ""][self.pick(4)]
    }
}

/// The `i`th key of a mapping: a scalar, or now and then a flow collection.
fn key(i: usize, style: &mut Style) -> String {
    match style.pick(8) {
        0 => format!("'k {i}'"),
        1 => format!("\"k{i}\""),
        2 => format!("[k{i}]"),
        3 => format!("[k{i}, {{z: [k{i}]}}]"),
        _ => format!("k{i}"),
    }
}

/// `node` on one line, in flow style.
fn flow(node: &Node, style: &mut Style, out: &mut String) {
    match node {
        Node::Scalar => out.push_str(style.scalar(true)),
        Node::Seq(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                match item {
                    // A one-pair mapping written as a pair: `[k0: v]`.
                    Node::Map(values) if values.len() == 1 && style.pick(2) == 0 => {
                        out.push_str(&key(0, style));
                        out.push_str(": ");
                        flow(&values[0], style, out);
                    }
                    _ => flow(item, style, out),
                }
            }
            out.push(']');
        }
        Node::Map(values) => {
            out.push('{');
            for (i, value) in values.iter().enumerate() {
                if i > 0 {
                    out.push_str(if style.pick(2) == 0 { ", " } else { ",\n " });
                }
                out.push_str(&key(i, style));
                out.push_str(": ");
                flow(value, style, out);
            }
            out.push('}');
        }
    }
}

/// `node` after a `key:` or `- ` indicator whose collection is indented `indent` columns (the
/// column of the key or the dash); ends with a line break.
fn block(node: &Node, indent: usize, after_dash: bool, style: &mut Style, out: &mut String) {
    let spaces = |n: usize| " ".repeat(n);
    match node {
        Node::Scalar if style.pick(5) == 0 => {
            out.push_str([" |", " >-", " |+", " |2"][style.pick(4)]);
            out.push_str(style.comment());
            out.push('\n');
            if style.pick(3) > 0 {
                out.push_str(&format!("{0}[[ {{ ' \"\n\n{0} ]] #\n", spaces(indent + 2)));
            }
        }
        Node::Scalar => {
            out.push(' ');
            out.push_str(style.scalar(false));
            out.push_str(style.comment());
            out.push('\n');
        }
        Node::Seq(items) | Node::Map(items) if items.is_empty() || style.pick(4) == 0 => {
            out.push(' ');
            flow(node, style, out);
            out.push_str(style.comment());
            out.push('\n');
        }
        Node::Seq(items) => {
            // Compact after a dash (`- - x`), indentless after a key, or indented.
            let (mut first_inline, column) = match (after_dash, style.pick(2)) {
                (true, 0) => (true, indent + 2),
                (false, 0) => (false, indent),
                _ => (false, indent + 2),
            };
            if !first_inline {
                out.push('\n');
            }
            for item in items {
                if first_inline {
                    out.push(' ');
                    first_inline = false;
                } else {
                    out.push_str(&spaces(column));
                }
                out.push('-');
                block(item, column, true, style, out);
            }
        }
        Node::Map(values) => {
            let column = indent + 2;
            let mut first_inline = after_dash && style.pick(2) == 0;
            let mut first = true;
            if !first_inline {
                out.push('\n');
            }
            for (i, value) in values.iter().enumerate() {
                if first_inline {
                    out.push(' ');
                    first_inline = false;
                } else {
                    out.push_str(&spaces(column));
                }
                if !first && style.pick(6) == 0 {
                    // An explicit key: `? key` and `: value` on lines of their own.
                    out.push_str(&format!("? {}\n{}:", key(i, style), spaces(column)));
                } else {
                    out.push_str(&key(i, style));
                    out.push(':');
                }
                first = false;
                block(value, column, false, style, out);
            }
        }
    }
}

fn render(node: &Node, seed: u64) -> String {
    let mut style = Style(seed | 1);
    let mut out = String::new();
    match node {
        Node::Map(values) if !values.is_empty() && style.pick(3) > 0 => {
            for (i, value) in values.iter().enumerate() {
                out.push_str(&key(i, &mut style));
                out.push(':');
                block(value, 0, false, &mut style, &mut out);
            }
        }
        Node::Seq(items) if !items.is_empty() && style.pick(3) > 0 => {
            for item in items {
                out.push('-');
                block(item, 0, true, &mut style, &mut out);
            }
        }
        _ => flow(node, &mut style, &mut out),
    }
    out
}

/// Check the count against serde_norway on `text`; whether serde_norway parsed it.
fn agrees_with_serde_norway(text: &str) -> Result<bool, TestCaseError> {
    let counted = yaml_depth(text, 64);
    match serde_norway::from_str::<Value>(text) {
        Ok(value) => {
            prop_assert_eq!(counted.syntax_error, None, "serde_norway parsed {:?}", text);
            prop_assert_eq!(counted.max, value_depth(&value), "the depth of {:?} ({:?})", text, value);
            Ok(true)
        }
        Err(_) => Ok(false),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn the_count_agrees_with_serde_norway_on_syntax_soup(text in soup()) {
        agrees_with_serde_norway(&text)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    #[test]
    fn the_count_agrees_with_serde_norway_on_rendered_trees(node in tree(), seed in any::<u64>()) {
        let text = render(&node, seed);
        prop_assert!(agrees_with_serde_norway(&text)?, "the rendering is not YAML:\n{}", text);
    }

    /// Any prefix of YAML, any one character removed, a piece of syntax put in anywhere: partial,
    /// broken and changed documents.
    #[test]
    fn the_count_agrees_with_serde_norway_on_broken_trees(
        node in tree(),
        seed in any::<u64>(),
        cut in any::<prop::sample::Index>(),
        piece in prop::sample::select(PIECES),
    ) {
        let text = render(&node, seed);
        let at = cut.index(text.len() + 1);
        let at = (0..=at).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        agrees_with_serde_norway(&text[..at])?;
        let mut removed = text.clone();
        if let Some((i, _)) = text.char_indices().nth(cut.index(text.chars().count().max(1))) {
            removed.remove(i);
            agrees_with_serde_norway(&removed)?;
            let mut inserted = text.clone();
            inserted.insert_str(i, piece);
            agrees_with_serde_norway(&inserted)?;
        }
    }
}
