//! The public API of `rlock-runtime`, listed in `tests/public-api.txt`, so that a change to it
//! shows in review (and in CHANGELOG.md) instead of slipping in.
//!
//! The list is read off the sources with `syn`: every item reachable from the crate root
//! through `pub` modules and `pub use`, the public fields, variants and trait items of the
//! types among them, their public inherent methods and the trait impls that name them, with
//! the `cfg` that gates each. `#[doc(hidden)]` items (the macro's support module) and
//! `#[cfg(test)]` code are left out.
//!
//! After an intended change, write the new list with
//! `RLOCK_BLESS=1 cargo test -p rlock-runtime --test public_api` and commit it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use quote::ToTokens;
use syn::{Attribute, ImplItem, Item, TraitItem, UseTree, Visibility};

const CRATE: &str = "rlock_runtime";

#[test]
fn the_public_api_is_the_listed_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listed_path = root.join("tests/public-api.txt");
    let actual = public_api(&root.join("src/lib.rs"));

    if std::env::var_os("RLOCK_BLESS").is_some() {
        fs::write(&listed_path, &actual).expect("write tests/public-api.txt");
        return;
    }
    let listed = fs::read_to_string(&listed_path).unwrap_or_default();
    if listed != actual {
        let (listed_lines, actual_lines): (BTreeSet<_>, BTreeSet<_>) =
            (listed.lines().collect(), actual.lines().collect());
        let mut diff = String::new();
        for gone in listed_lines.difference(&actual_lines) {
            diff.push_str(&format!("- {gone}\n"));
        }
        for new in actual_lines.difference(&listed_lines) {
            diff.push_str(&format!("+ {new}\n"));
        }
        panic!(
            "the public API of rlock-runtime changed:\n{diff}\nIf this is intended, run \
             `RLOCK_BLESS=1 cargo test -p rlock-runtime --test public_api`, commit \
             tests/public-api.txt and say what changed in CHANGELOG.md."
        );
    }
}

/// A module's path from the crate root and its items.
struct Module {
    items: Vec<Item>,
}

/// Every module of the crate, `#[cfg(test)]` ones left out, by path (`[]` is the root).
fn load_modules(file: &Path, path: Vec<String>, out: &mut BTreeMap<Vec<String>, Module>) {
    let source = fs::read_to_string(file).unwrap_or_else(|e| panic!("read {file:?}: {e}"));
    let parsed = syn::parse_file(&source).unwrap_or_else(|e| panic!("parse {file:?}: {e}"));
    // Children of `lib.rs` and `x/mod.rs` live beside them; those of `x.rs` in `x/`.
    let dir: PathBuf = match file.file_name().and_then(|n| n.to_str()) {
        Some("lib.rs" | "mod.rs") => file.parent().expect("a parent").to_path_buf(),
        _ => file.with_extension(""),
    };
    add_module(parsed.items, &dir, path, out);
}

fn add_module(
    items: Vec<Item>,
    dir: &Path,
    path: Vec<String>,
    out: &mut BTreeMap<Vec<String>, Module>,
) {
    let mut kept = Vec::new();
    for item in items {
        if is_test_only(item_attrs(&item)) {
            continue;
        }
        if let Item::Mod(module) = &item {
            let mut child = path.clone();
            child.push(module.ident.to_string());
            match &module.content {
                Some((_, inline)) => add_module(
                    inline.clone(),
                    &dir.join(module.ident.to_string()),
                    child,
                    out,
                ),
                None => {
                    let flat = dir.join(format!("{}.rs", module.ident));
                    let nested = dir.join(module.ident.to_string()).join("mod.rs");
                    load_modules(if flat.exists() { &flat } else { &nested }, child, out);
                }
            }
        }
        kept.push(item);
    }
    out.insert(path, Module { items: kept });
}

/// One exported item: where users name it and what it is.
struct Export<'a> {
    path: String,
    item: &'a Item,
    /// The `cfg`s on the way to it (a gated module, then the item).
    cfg: Vec<String>,
}

fn public_api(lib: &Path) -> String {
    let mut modules = BTreeMap::new();
    load_modules(lib, Vec::new(), &mut modules);

    let mut exports = Vec::new();
    let mut lines = Vec::new();
    collect_exports(&modules, &[], CRATE, &[], &mut exports, &mut lines);

    let exported_names: BTreeSet<String> =
        exports.iter().filter_map(|e| item_ident(e.item)).collect();
    // Traits of the crate that users cannot name: their impls are not the API.
    let private_traits: BTreeSet<String> = modules
        .values()
        .flat_map(|m| &m.items)
        .filter(|item| matches!(item, Item::Trait(_)))
        .filter_map(item_ident)
        .filter(|name| !exported_names.contains(name))
        .collect();
    for export in &exports {
        describe(export, &mut lines);
    }
    // Methods and trait impls, wherever in the crate they are written.
    for module in modules.values() {
        for item in &module.items {
            if let Item::Impl(imp) = item {
                describe_impl(imp, &exports, &exported_names, &private_traits, &mut lines);
            }
        }
    }
    lines.sort();
    lines.dedup();
    let mut text =
        String::from("# The public API of rlock-runtime; kept true by tests/public_api.rs.\n");
    for (_, line) in lines {
        text.push_str(&line);
        text.push('\n');
    }
    text
}

/// (sort key, line): lines sort by the path they describe, then by their text.
type Line = (String, String);

fn collect_exports<'a>(
    modules: &'a BTreeMap<Vec<String>, Module>,
    module_path: &[String],
    shown_as: &str,
    cfg: &[String],
    exports: &mut Vec<Export<'a>>,
    lines: &mut Vec<Line>,
) {
    let Some(module) = modules.get(module_path) else {
        return;
    };
    for item in &module.items {
        if !is_pub(item) || is_hidden(item_attrs(item)) {
            continue;
        }
        let mut item_cfg = cfg.to_vec();
        item_cfg.extend(cfgs(item_attrs(item)));
        match item {
            Item::Mod(m) => {
                let shown = format!("{shown_as}::{}", m.ident);
                lines.push((shown.clone(), gated(&item_cfg, format!("pub mod {shown}"))));
                let mut child = module_path.to_vec();
                child.push(m.ident.to_string());
                collect_exports(modules, &child, &shown, &item_cfg, exports, lines);
            }
            Item::Use(u) => {
                let mut leaves = Vec::new();
                flatten_use(&u.tree, Vec::new(), &mut leaves);
                for (source, name) in leaves {
                    let shown = format!("{shown_as}::{name}");
                    match resolve(modules, module_path, &source) {
                        Some(target) => exports.push(Export {
                            path: shown,
                            item: target,
                            cfg: item_cfg.clone(),
                        }),
                        None => lines.push((
                            shown.clone(),
                            gated(
                                &item_cfg,
                                format!("pub use {} as {shown}", source.join("::")),
                            ),
                        )),
                    }
                }
            }
            Item::Impl(_) | Item::Macro(_) => {}
            _ => {
                if let Some(ident) = item_ident(item) {
                    exports.push(Export {
                        path: format!("{shown_as}::{ident}"),
                        item,
                        cfg: item_cfg,
                    });
                }
            }
        }
    }
}

/// The item a `use` path names inside the crate, or `None` for another crate's.
fn resolve<'a>(
    modules: &'a BTreeMap<Vec<String>, Module>,
    from: &[String],
    source: &[String],
) -> Option<&'a Item> {
    let (mut module, rest): (Vec<String>, &[String]) = match source.first()?.as_str() {
        "crate" => (Vec::new(), &source[1..]),
        "self" => (from.to_vec(), &source[1..]),
        "super" => (from[..from.len().saturating_sub(1)].to_vec(), &source[1..]),
        "" => return None,
        _ => (from.to_vec(), source),
    };
    let (name, dirs) = rest.split_last()?;
    for dir in dirs {
        module.push(dir.clone());
    }
    let items = &modules.get(&module)?.items;
    items
        .iter()
        .find(|item| !matches!(item, Item::Use(_)) && item_ident(item).as_deref() == Some(name))
}

/// `use a::{b, c as d}` as (`[a, b]`, `b`) and (`[a, c]`, `d`).
fn flatten_use(tree: &UseTree, prefix: Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    let with = |segment: String| {
        let mut path = prefix.clone();
        path.push(segment);
        path
    };
    match tree {
        UseTree::Path(p) => flatten_use(&p.tree, with(p.ident.to_string()), out),
        UseTree::Name(n) => out.push((with(n.ident.to_string()), n.ident.to_string())),
        UseTree::Rename(r) => out.push((with(r.ident.to_string()), r.rename.to_string())),
        UseTree::Group(g) => {
            for tree in &g.items {
                flatten_use(tree, prefix.clone(), out);
            }
        }
        UseTree::Glob(_) => out.push((with("*".into()), "*".into())),
    }
}

fn describe(export: &Export<'_>, lines: &mut Vec<Line>) {
    let path = &export.path;
    let cfg = &export.cfg;
    let mut push = |key: String, text: String| lines.push((key, gated(cfg, text)));
    match export.item {
        Item::Struct(s) => {
            push(
                path.clone(),
                format!(
                    "{}pub struct {path}{}",
                    derives_and_markers(&s.attrs),
                    tidy(&s.generics)
                ),
            );
            for (i, field) in s.fields.iter().enumerate() {
                if is_pub_vis(&field.vis) {
                    let name = field
                        .ident
                        .as_ref()
                        .map_or_else(|| i.to_string(), ToString::to_string);
                    push(
                        format!("{path}.{name}"),
                        format!("pub {path}.{name}: {}", tidy(&field.ty)),
                    );
                }
            }
        }
        Item::Enum(e) => {
            push(
                path.clone(),
                format!(
                    "{}pub enum {path}{}",
                    derives_and_markers(&e.attrs),
                    tidy(&e.generics)
                ),
            );
            for variant in &e.variants {
                // Docs and `#[source]` are not the API; `#[non_exhaustive]` is.
                let mut bare = variant.clone();
                bare.attrs.retain(|a| a.path().is_ident("non_exhaustive"));
                for field in bare.fields.iter_mut() {
                    field.attrs.clear();
                }
                push(
                    format!("{path}::{}", variant.ident),
                    format!("{path}::{}", tidy(&bare)),
                );
            }
        }
        Item::Trait(t) => {
            push(
                path.clone(),
                format!("pub trait {path}{}", tidy(&t.generics)),
            );
            for item in &t.items {
                let text = match item {
                    TraitItem::Fn(f) => tidy(&f.sig),
                    TraitItem::Type(t) => format!("type {}", t.ident),
                    TraitItem::Const(c) => format!("const {}: {}", c.ident, tidy(&c.ty)),
                    _ => continue,
                };
                push(path.clone(), format!("{path}: {text}"));
            }
        }
        Item::Fn(f) => push(path.clone(), format!("pub {}", named_sig(&f.sig, path))),
        Item::Const(c) => push(path.clone(), format!("pub const {path}: {}", tidy(&c.ty))),
        Item::Static(s) => push(path.clone(), format!("pub static {path}: {}", tidy(&s.ty))),
        Item::Type(t) => push(
            path.clone(),
            format!("pub type {path}{} = {}", tidy(&t.generics), tidy(&t.ty)),
        ),
        other => push(path.clone(), format!("pub {path}: {}", tidy(other))),
    }
}

/// A type's public methods, and the trait impls that name an exported type or trait.
fn describe_impl(
    imp: &syn::ItemImpl,
    exports: &[Export<'_>],
    exported: &BTreeSet<String>,
    private_traits: &BTreeSet<String>,
    lines: &mut Vec<Line>,
) {
    if is_hidden(&imp.attrs) {
        return;
    }
    let self_name = last_ident(&imp.self_ty);
    let cfg = cfgs(&imp.attrs);
    match &imp.trait_ {
        None => {
            let Some(export) = exports
                .iter()
                .find(|e| item_ident(e.item) == self_name && self_name.is_some())
            else {
                return;
            };
            for item in &imp.items {
                let (vis, attrs) = match item {
                    ImplItem::Fn(f) => (&f.vis, &f.attrs),
                    ImplItem::Const(c) => (&c.vis, &c.attrs),
                    _ => continue,
                };
                if !is_pub_vis(vis) || is_hidden(attrs) {
                    continue;
                }
                let mut gates = export.cfg.clone();
                gates.extend(cfg.iter().cloned());
                gates.extend(cfgs(attrs));
                let (name, text) = match item {
                    ImplItem::Fn(f) => {
                        let path = format!("{}::{}", export.path, f.sig.ident);
                        (path.clone(), format!("pub {}", named_sig(&f.sig, &path)))
                    }
                    ImplItem::Const(c) => {
                        let path = format!("{}::{}", export.path, c.ident);
                        (path.clone(), format!("pub const {path}: {}", tidy(&c.ty)))
                    }
                    _ => continue,
                };
                lines.push((name, gated(&gates, text)));
            }
        }
        Some((trait_path, _)) => {
            let trait_name = trait_path.segments.last().map(|s| s.ident.to_string());
            let names_ours =
                |name: &Option<String>| name.as_ref().is_some_and(|n| exported.contains(n));
            let private = trait_name
                .as_ref()
                .is_some_and(|t| private_traits.contains(t));
            // `From<LockError> for tonic::Status` names ours in the trait's arguments.
            let argument_names: Vec<Option<String>> = match trait_path.segments.last() {
                Some(syn::PathSegment {
                    arguments: syn::PathArguments::AngleBracketed(args),
                    ..
                }) => args
                    .args
                    .iter()
                    .filter_map(|arg| match arg {
                        syn::GenericArgument::Type(ty) => Some(last_ident(ty)),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let in_arguments = argument_names.iter().any(names_ours);
            if private || (!names_ours(&self_name) && !names_ours(&trait_name) && !in_arguments) {
                return;
            }
            // Listed beside the exported type, or beside the trait for a foreign type.
            let path_of = |name: &Option<String>| {
                exports
                    .iter()
                    .find(|e| name.is_some() && item_ident(e.item) == *name)
                    .map(|e| e.path.clone())
            };
            let key = path_of(&self_name)
                .or_else(|| path_of(&trait_name))
                .or_else(|| argument_names.iter().find_map(path_of))
                .unwrap_or_default();
            let text = format!(
                "impl{} {} for {}",
                tidy(&imp.generics),
                tidy(trait_path),
                tidy(&imp.self_ty),
            );
            lines.push((key, gated(&cfg, text)));
        }
    }
}

/// `async fn name(…)` with the name written as its full path.
fn named_sig(sig: &syn::Signature, path: &str) -> String {
    let text = tidy(sig);
    let ident = format!("fn {}", sig.ident);
    text.replacen(&ident, &format!("fn {path}"), 1)
}

fn derives_and_markers(attrs: &[Attribute]) -> String {
    let mut out = String::new();
    for attr in attrs {
        if attr.path().is_ident("derive") || attr.path().is_ident("non_exhaustive") {
            out.push_str(&tidy(attr));
            out.push(' ');
        }
    }
    out
}

fn gated(cfg: &[String], text: String) -> String {
    if cfg.is_empty() {
        text
    } else {
        format!("{} {text}", cfg.join(" "))
    }
}

fn cfgs(attrs: &[Attribute]) -> Vec<String> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg"))
        .map(tidy)
        .collect()
}

fn is_test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let text = tidy(&a.meta);
            text == "cfg(test)" || text == "cfg(doctest)"
        }
    })
}

fn is_hidden(attrs: &[Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("doc") && tidy(&a.meta).replace(' ', "") == "doc(hidden)")
}

fn is_pub(item: &Item) -> bool {
    let vis = match item {
        Item::Const(i) => &i.vis,
        Item::Enum(i) => &i.vis,
        Item::Fn(i) => &i.vis,
        Item::Mod(i) => &i.vis,
        Item::Static(i) => &i.vis,
        Item::Struct(i) => &i.vis,
        Item::Trait(i) => &i.vis,
        Item::Type(i) => &i.vis,
        Item::Union(i) => &i.vis,
        Item::Use(i) => &i.vis,
        _ => return false,
    };
    is_pub_vis(vis)
}

fn is_pub_vis(vis: &Visibility) -> bool {
    matches!(vis, Visibility::Public(_))
}

fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        _ => &[],
    }
}

fn item_ident(item: &Item) -> Option<String> {
    let ident = match item {
        Item::Const(i) => &i.ident,
        Item::Enum(i) => &i.ident,
        Item::Fn(i) => &i.sig.ident,
        Item::Mod(i) => &i.ident,
        Item::Static(i) => &i.ident,
        Item::Struct(i) => &i.ident,
        Item::Trait(i) => &i.ident,
        Item::Type(i) => &i.ident,
        Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

fn last_ident(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        syn::Type::Reference(r) => last_ident(&r.elem),
        _ => None,
    }
}

/// Tokens as a person writes them: `Result<T, E>`, not `Result < T , E >`.
fn tidy(tokens: &impl ToTokens) -> String {
    let mut text = tokens.to_token_stream().to_string();
    for (from, to) in [
        (" :: ", "::"),
        (":: ", "::"),
        (" ::", "::"),
        (" < ", "<"),
        ("< ", "<"),
        (" >", ">"),
        (" ,", ","),
        (" : ", ": "),
        ("& ", "&"),
        ("( ", "("),
        (" )", ")"),
        ("[ ", "["),
        (" ]", "]"),
        ("# [", "#["),
        (" ;", ";"),
        ("' ", "'"),
        (" (", "("),
        ("<>", ""),
        ("? ", "?"),
        (",)", ")"),
        (", }", " }"),
    ] {
        text = text.replace(from, to);
    }
    if let Some(stripped) = text.strip_suffix(',') {
        text = stripped.to_string();
    }
    // Keywords and arrows that the pass above glued to what follows.
    for keyword in ["fn", "impl", "dyn", "mut", "for", "where", "->", "=", "+"] {
        text = text.replace(&format!("{keyword}("), &format!("{keyword} ("));
    }
    text
}
