//! Key templates: `order:<user_id>`, `cart:<req.user.id>`, `job:<self.name>`.
//!
//! A template is literal text with placeholders in angle brackets. A placeholder names a
//! parameter (or `self`) and optionally walks fields (`.field`, or `.0` for tuples). `<<` and
//! `>>` stand for a literal `<` and `>`, `{{` and `}}` for a literal `{` and `}` (a single
//! brace is literal too, as in a hash tag `{order}:<id>`). Parsing here is about the text only;
//! whether the names exist is checked against the signature in `expand`, which also refuses
//! [`lookalikes`] of other tools' placeholders that name a parameter.

use std::ops::Range;

use crate::limits::MAX_KEY_LEN;

/// A parsed key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    pub(crate) segments: Vec<Segment>,
}

/// One part of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Text written into the key as it is.
    Literal(String),
    /// A value rendered through `Display` and escaped by the runtime.
    Placeholder(Placeholder),
}

/// `<root.field.field>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placeholder {
    /// A parameter name, or `self`.
    pub(crate) root: String,
    /// Field names or tuple indices, in order.
    pub(crate) fields: Vec<String>,
}

impl Placeholder {
    /// The placeholder as written, with its brackets.
    pub(crate) fn written(&self) -> String {
        let mut out = format!("<{}", self.root);
        for field in &self.fields {
            out.push('.');
            out.push_str(field);
        }
        out.push('>');
        out
    }
}

/// Characters that make a literal between two placeholders a separator.
///
/// Rendered values never contain them raw (the runtime percent-encodes them), so the first one
/// after a value marks where that value ends. `%` is left out on purpose: encoded values contain
/// it.
pub(crate) const SEPARATORS: &[char] =
    &[':', '/', '|', '#', ',', '{', '}', '*', '?', '[', ']', '\\'];

const SHAPE: &str = "a placeholder is a parameter name, optionally followed by fields, \
                     like `<user_id>`, `<req.user.id>` or `<self.tenant>`";

/// Parses a template; the error is a sentence that says what to write instead.
pub(crate) fn parse(text: &str) -> Result<Template, String> {
    if text.is_empty() {
        return Err("the key is empty; give it a name such as `key = \"order:<user_id>\"`".into());
    }
    let mut segments = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        match c {
            '<' if rest.starts_with("<<") => {
                literal.push('<');
                rest = &rest[2..];
            }
            '<' => {
                let body = &rest[1..];
                let close = body.find('>');
                let open = body.find('<');
                let end = match (close, open) {
                    (Some(close), Some(open)) if open < close => {
                        return Err(format!(
                            "the placeholder starting at `{}` is not closed before the next `<`; \
                             close it with `>` ({SHAPE}), or write `<<` for a literal `<`",
                            excerpt(rest)
                        ));
                    }
                    (Some(close), _) => close,
                    (None, _) => {
                        return Err(format!(
                            "unclosed `<` in the key at `{}`; close the placeholder with `>` \
                             ({SHAPE}), or write `<<` for a literal `<`",
                            excerpt(rest)
                        ));
                    }
                };
                let placeholder = parse_placeholder(&body[..end])?;
                if !literal.is_empty() {
                    segments.push(Segment::Literal(std::mem::take(&mut literal)));
                }
                segments.push(Segment::Placeholder(placeholder));
                rest = &body[end + 1..];
            }
            '>' if rest.starts_with(">>") => {
                literal.push('>');
                rest = &rest[2..];
            }
            '{' if rest.starts_with("{{") => {
                literal.push('{');
                rest = &rest[2..];
            }
            '}' if rest.starts_with("}}") => {
                literal.push('}');
                rest = &rest[2..];
            }
            '>' => {
                return Err(format!(
                    "unmatched `>` in the key at `{}`; open the placeholder with `<` ({SHAPE}), \
                     or write `>>` for a literal `>`",
                    excerpt(rest)
                ));
            }
            _ => {
                literal.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    if !literal.is_empty() {
        segments.push(Segment::Literal(literal));
    }
    let template = Template { segments };
    let literal_len: usize = template
        .segments
        .iter()
        .map(|segment| match segment {
            Segment::Literal(text) => text.len(),
            Segment::Placeholder(_) => 0,
        })
        .sum();
    if literal_len > MAX_KEY_LEN {
        return Err(format!(
            "the key's literal text is {literal_len} bytes long, more than the {MAX_KEY_LEN} \
             bytes a lock key may have; shorten it"
        ));
    }
    Ok(template)
}

/// Text in a template's literal part written the way another tool writes a placeholder:
/// `{user_id}` (Rust's `format!`), `${user_id}` and `#{user_id}` (Spring), or a key that
/// starts with `#user_id` (SpEL, as lock4j takes it). Here it is literal text: if it names a
/// parameter, every call would render the same key and share one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lookalike {
    /// Where it is in the template's text, in bytes.
    pub(crate) range: Range<usize>,
    /// The name and fields inside: `user_id`, `req.user.id`.
    pub(crate) path: String,
}

impl Lookalike {
    /// The parameter (or `self`) it would name.
    pub(crate) fn root(&self) -> &str {
        self.path.split('.').next().unwrap_or_default()
    }
}

/// The [`Lookalike`]s in `text`, a template that [`parse`]s: escapes and real placeholders
/// are skipped.
pub(crate) fn lookalikes(text: &str) -> Vec<Lookalike> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        if ["<<", ">>", "{{", "}}"].iter().any(|e| rest.starts_with(e)) {
            i += 2;
            continue;
        }
        if rest.starts_with('<') {
            // A placeholder: it parsed, so it closes.
            i += rest.find('>').map_or(rest.len(), |end| end + 1);
            continue;
        }
        let opener = if rest.starts_with("${") || rest.starts_with("#{") {
            Some(2)
        } else if rest.starts_with('{') {
            Some(1)
        } else {
            None
        };
        if let Some(open) = opener {
            let path = path_at(&rest[open..]);
            if !path.is_empty() && rest[open + path.len()..].starts_with('}') {
                let end = i + open + path.len() + 1;
                found.push(Lookalike {
                    range: i..end,
                    path: path.to_string(),
                });
                i = end;
                continue;
            }
        } else if i == 0 && rest.starts_with('#') {
            let path = path_at(&rest[1..]);
            if !path.is_empty() {
                found.push(Lookalike {
                    range: 0..1 + path.len(),
                    path: path.to_string(),
                });
                i = 1 + path.len();
                continue;
            }
        }
        i += rest.chars().next().map_or(1, char::len_utf8);
    }
    found
}

/// The longest `name.field.0` path at the start of `text` (empty if there is none).
fn path_at(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(text.len());
    let mut path = &text[..end];
    // A trailing dot is not part of the path (`#id.` ends a sentence, not a field).
    path = path.trim_end_matches('.');
    let mut parts = path.split('.');
    let root_ok = parts.next().is_some_and(is_identifier);
    if root_ok && parts.all(|p| is_identifier(p) || is_tuple_index(p)) {
        path
    } else {
        ""
    }
}

/// The start of `text`, short enough to quote in a message.
fn excerpt(text: &str) -> String {
    let mut out: String = text.chars().take(24).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

fn parse_placeholder(inner: &str) -> Result<Placeholder, String> {
    let written = format!("<{inner}>");
    if inner.is_empty() {
        return Err(
            "empty placeholder `<>` in the key; put a parameter name inside, like \
                    `<user_id>`, or write `<<>>` for a literal `<>`"
                .to_string(),
        );
    }
    if inner.chars().any(char::is_whitespace) {
        let compact: String = inner.chars().filter(|c| !c.is_whitespace()).collect();
        return Err(format!(
            "the placeholder `{written}` contains whitespace; write it as `<{compact}>`"
        ));
    }
    if let Some(bad) = inner
        .chars()
        .find(|c| !(c.is_alphanumeric() || *c == '_' || *c == '.'))
    {
        let why = match bad {
            '(' | ')' => {
                "method calls are not supported; pass the value as a parameter or read a field"
            }
            '[' | ']' => "indexing is not supported; pass the element as a parameter",
            ':' => "paths are not supported; a placeholder starts with a parameter name",
            '&' | '*' => "references are followed automatically; write the name alone",
            _ => "only names and `.` are allowed",
        };
        return Err(format!(
            "the placeholder `{written}` contains `{bad}`: {why}; {SHAPE}"
        ));
    }
    let mut parts = inner.split('.');
    let root = parts.next().unwrap_or_default();
    if root.is_empty() {
        return Err(format!(
            "the placeholder `{written}` starts with `.`; it must start with a parameter name, \
             like `<user_id>` or `<req.user_id>`"
        ));
    }
    if !is_identifier(root) {
        return Err(format!(
            "the placeholder `{written}` must start with a parameter name, and `{root}` is not \
             an identifier; {SHAPE}"
        ));
    }
    let mut fields = Vec::new();
    for field in parts {
        if field.is_empty() {
            let fix = inner
                .split('.')
                .filter(|part| !part.is_empty())
                .collect::<Vec<_>>()
                .join(".");
            return Err(if inner.ends_with('.') && !inner.contains("..") {
                format!(
                    "the placeholder `{written}` ends with `.`; name a field after it, \
                     or write `<{fix}>`"
                )
            } else {
                format!(
                    "the placeholder `{written}` has an empty field between two dots; \
                     write `<{fix}>`"
                )
            });
        }
        if !(is_identifier(field) || is_tuple_index(field)) {
            return Err(format!(
                "`{field}` in the placeholder `{written}` is not a field name or a tuple index \
                 (`.0`, `.1`, …); {SHAPE}"
            ));
        }
        fields.push(field.to_string());
    }
    Ok(Placeholder {
        root: root.to_string(),
        fields,
    })
}

fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) if first.is_alphabetic() || first == '_' => {
            chars.all(|c| c.is_alphanumeric() || c == '_')
        }
        _ => false,
    }
}

fn is_tuple_index(text: &str) -> bool {
    !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'))
}

/// Checks that every two placeholders are separated by literal text with a [`SEPARATORS`]
/// character, so that different arguments always render different keys.
pub(crate) fn check_separators(template: &Template) -> Result<(), String> {
    let mut previous: Option<&Placeholder> = None;
    let mut between = String::new();
    for segment in &template.segments {
        match segment {
            Segment::Literal(text) => between.push_str(text),
            Segment::Placeholder(placeholder) => {
                if let Some(previous) = previous
                    && !between.contains(SEPARATORS)
                {
                    let (a, b) = (previous.written(), placeholder.written());
                    let how = if between.is_empty() {
                        "nothing separates them".to_string()
                    } else {
                        format!("`{between}` between them contains no separator")
                    };
                    return Err(format!(
                        "the placeholders `{a}` and `{b}` need a separator between them ({how}): \
                         without one, different arguments can render the same key (`1` and `23` \
                         give `123` just like `12` and `3`); put one of `:` `/` `|` `#` `,` \
                         between them, as in `{a}:{b}`"
                    ));
                }
                previous = Some(placeholder);
                between.clear();
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(text: &str) -> Segment {
        Segment::Literal(text.into())
    }

    fn ph(root: &str, fields: &[&str]) -> Segment {
        Segment::Placeholder(Placeholder {
            root: root.into(),
            fields: fields.iter().map(|f| f.to_string()).collect(),
        })
    }

    #[test]
    fn parses_literals_and_placeholders() {
        assert_eq!(
            parse("order:<user_id>").map(|t| t.segments),
            Ok(vec![lit("order:"), ph("user_id", &[])])
        );
        assert_eq!(
            parse("<a.b.0>:x:<self.c>!").map(|t| t.segments),
            Ok(vec![
                ph("a", &["b", "0"]),
                lit(":x:"),
                ph("self", &["c"]),
                lit("!")
            ])
        );
        assert_eq!(parse("plain").map(|t| t.segments), Ok(vec![lit("plain")]));
        assert_eq!(parse("a<<b>>c").map(|t| t.segments), Ok(vec![lit("a<b>c")]));
        assert_eq!(
            parse("ünï:<日本>").map(|t| t.segments),
            Ok(vec![lit("ünï:"), ph("日本", &[])])
        );
    }

    #[test]
    fn malformed_placeholders_are_explained() {
        for (text, needle) in [
            ("", "empty"),
            ("a<", "unclosed `<`"),
            ("a<b", "unclosed `<`"),
            ("<>", "empty placeholder"),
            ("< a>", "whitespace"),
            ("a>", "unmatched `>`"),
            ("<a<b>", "not closed before the next `<`"),
            ("<a.>", "ends with `.`"),
            ("<a..b>", "empty field between two dots"),
            ("<.a>", "starts with `.`"),
            ("<1a>", "`1a` is not an identifier"),
            ("<a.b()>", "method calls"),
            ("<a[0]>", "indexing"),
            ("<a-b>", "contains `-`"),
            ("<a.01>", "not a field name"),
            ("<a.1b>", "not a field name"),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn doubled_braces_are_literal_braces() {
        assert_eq!(
            parse("{{tag}}:<id>:{x}").map(|t| t.segments),
            Ok(vec![lit("{tag}:"), ph("id", &[]), lit(":{x}")])
        );
    }

    #[test]
    fn other_tools_placeholders_are_found() {
        let found = |text: &str| {
            lookalikes(text)
                .into_iter()
                .map(|l| (text[l.range.clone()].to_string(), l.path))
                .collect::<Vec<_>>()
        };
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(found("order:{user_id}"), [pair("{user_id}", "user_id")]);
        assert_eq!(found("#user_id"), [pair("#user_id", "user_id")]);
        assert_eq!(
            found("#req.user.id:x"),
            [pair("#req.user.id", "req.user.id")]
        );
        assert_eq!(
            found("a:${req.id}:#{b}"),
            [pair("${req.id}", "req.id"), pair("#{b}", "b")]
        );
        // Escapes, real placeholders, hash tags that are not names, a `#` inside the key.
        assert!(found("{{user_id}}:<id>").is_empty());
        assert!(found("{tag-1}:<id>").is_empty());
        assert!(found("a#b:{}:{1x}").is_empty());
        assert_eq!(
            lookalikes("#id.").first().map(|l| l.range.clone()),
            Some(0..3)
        );
    }

    #[test]
    fn separators() {
        let ok = |t: &str| parse(t).and_then(|t| check_separators(&t));
        assert!(ok("a:<x>:<y>").is_ok());
        assert!(ok("<x>/<y>|<z>").is_ok());
        assert!(ok("<x>").is_ok());
        assert!(ok("<x>-a{<y>").is_ok());
        let err = ok("<x><y>").expect_err("adjacent");
        assert!(err.contains("nothing separates them"), "{err}");
        let err = ok("<x>-and-<y>").expect_err("no separator");
        assert!(err.contains("`-and-` between them"), "{err}");
        assert!(ok("<x>%<y>").is_err());
    }
}
