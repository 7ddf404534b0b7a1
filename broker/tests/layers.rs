//! The broker's layers, kept true: every top-level module of `broker/src`
//! sits in exactly one layer of the table in `docs/architecture.md`, and
//! its `crate::` paths outside tests (use statements, `use crate::{a, b}`
//! groups, inline paths) reach only modules of lower layers, or earlier
//! modules of its own layer where the table says its siblings are ordered.
//! The table is held once, in the document; this test reads it from there,
//! checks `lib.rs` declares exactly its modules, and that no source file
//! outside tests is past 500 lines.
//!
//! `TIDEGATE_LAYERS_SRC` points the check at another copy of `broker/src`
//! (to show that an older tree breaks the table).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 500;

/// One row of the table.
#[derive(Debug)]
struct Layer {
    name: String,
    modules: Vec<String>,
    /// Siblings may import earlier siblings (`ordered`), or none at all.
    ordered: bool,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the broker crate sits in the repository")
        .to_path_buf()
}

fn src_dir() -> PathBuf {
    std::env::var_os("TIDEGATE_LAYERS_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("broker/src"))
}

/// The table between `<!-- layers -->` and `<!-- /layers -->`: rows of
/// `| name | `a`, `b`, … | ordered or none | …`, lowest layer first.
fn table() -> Vec<Layer> {
    let doc =
        fs::read_to_string(repo().join("docs/architecture.md")).expect("docs/architecture.md");
    let start = doc
        .find("<!-- layers -->")
        .expect("a <!-- layers --> marker");
    let end = doc
        .find("<!-- /layers -->")
        .expect("a <!-- /layers --> marker");
    let mut layers = Vec::new();
    for line in doc[start..end].lines() {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if cells.len() < 3
            || cells[0].is_empty()
            || cells[0].starts_with('-')
            || cells[0] == "layer"
        {
            continue;
        }
        let modules = cells[1]
            .split(',')
            .map(|m| m.trim().trim_matches('`').to_owned())
            .filter(|m| !m.is_empty())
            .collect();
        let ordered = match cells[2] {
            "ordered" => true,
            "none" => false,
            other => panic!("siblings must be `ordered` or `none`, not {other:?} ({line})"),
        };
        layers.push(Layer {
            name: cells[0].to_owned(),
            modules,
            ordered,
        });
    }
    assert!(!layers.is_empty(), "the layer table has rows");
    layers
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("readable source dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules present: `x.rs` and `x/mod.rs`.
fn present_modules(src: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for entry in fs::read_dir(src).expect("readable src") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_stem()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        let module_dir = path.is_dir() && path.join("mod.rs").exists();
        let module_file =
            path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main";
        if module_dir || module_file {
            out.insert(name);
        }
    }
    out
}

/// Where a file's child modules live: `a/b.rs` → `a/b/`, `a/mod.rs` → `a/`.
fn child_dir(file: &Path) -> PathBuf {
    let parent = file.parent().expect("a parent dir");
    match file.file_stem().and_then(|n| n.to_str()) {
        Some("mod" | "lib" | "main") => parent.to_path_buf(),
        Some(stem) => parent.join(stem),
        None => parent.to_path_buf(),
    }
}

/// Files that are only compiled for tests: `#[cfg(test)] mod x;` and
/// everything under such a module, `tests.rs`, and files under `tests/`.
fn test_only(files: &[PathBuf], texts: &HashMap<PathBuf, String>) -> BTreeSet<PathBuf> {
    let mut roots = Vec::new();
    for f in files {
        let text = &texts[f];
        let mut rest = text.as_str();
        while let Some(at) = rest.find("#[cfg(test)]") {
            rest = &rest[at + "#[cfg(test)]".len()..];
            let item = rest.trim_start();
            let item = item
                .strip_prefix("pub(crate) ")
                .or_else(|| item.strip_prefix("pub "))
                .unwrap_or(item);
            if let Some(decl) = item.strip_prefix("mod ") {
                let name: String = decl
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let after = decl[name.len()..].trim_start();
                if after.starts_with(';') {
                    let dir = child_dir(f);
                    roots.push(dir.join(format!("{name}.rs")));
                    roots.push(dir.join(&name));
                }
            }
        }
    }
    files
        .iter()
        .filter(|f| {
            f.file_name().is_some_and(|n| n == "tests.rs")
                || f.components().any(|c| c.as_os_str() == "tests")
                || roots.iter().any(|r| f.starts_with(r))
        })
        .cloned()
        .collect()
}

/// The source without comments and without inline `#[cfg(test)] mod x { … }`
/// blocks.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        // Comments: `//` outside a string literal (quotes counted roughly,
        // enough for this code base's URLs in strings).
        let mut in_str = false;
        let mut prev = '\0';
        let mut cut = line.len();
        for (i, c) in line.char_indices() {
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            }
            if !in_str && c == '/' && prev == '/' {
                cut = i - 1;
                break;
            }
            prev = c;
        }
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    let mut code = out;
    while let Some(at) = code.find("#[cfg(test)]") {
        let after = &code[at..];
        let Some(brace) = after.find('{') else { break };
        let head = &after["#[cfg(test)]".len()..brace];
        if !head.trim_start().starts_with("mod ") || head.contains(';') {
            // Not an inline test module: keep it, look further.
            code.replace_range(at..at + "#[cfg(test)]".len(), "");
            continue;
        }
        let mut depth = 0usize;
        let mut end = code.len();
        for (i, c) in after[brace..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = at + brace + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        code.replace_range(at..end, "");
    }
    code
}

/// Top-level names reached through `crate::`: `crate::a::…` and the
/// first segment of each item of `crate::{a::X, b, c::{…}}`.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1usize;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if depth == 1 && item_start => {
                        item_start = false;
                        let name = ident(&group[i..]);
                        if !name.is_empty() {
                            out.insert(name);
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

/// `pub use module::Name;` and `pub use module::{A, B};` in `lib.rs`: the
/// crate-root names and the module each comes from.
fn root_reexports(lib: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for line in lib.lines() {
        let Some(path) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let path = path.trim_end_matches(';');
        let Some((module, items)) = path.split_once("::") else {
            continue;
        };
        for item in items.trim_matches(|c| c == '{' || c == '}').split(',') {
            let name = item.trim().rsplit("::").next().unwrap_or("").trim();
            if !name.is_empty() {
                out.insert(name.to_owned(), module.to_owned());
            }
        }
    }
    out
}

#[test]
fn modules_import_only_downward() {
    let src = src_dir();
    let layers = table();
    let mut place: HashMap<&str, (usize, usize)> = HashMap::new();
    for (l, layer) in layers.iter().enumerate() {
        for (i, m) in layer.modules.iter().enumerate() {
            assert!(
                place.insert(m, (l, i)).is_none(),
                "{m} is in the table twice"
            );
        }
    }
    let present = present_modules(&src);
    let tabled: BTreeSet<String> = place.keys().map(|m| (*m).to_owned()).collect();
    let missing: Vec<_> = present.difference(&tabled).collect();
    let stale: Vec<_> = tabled.difference(&present).collect();
    let mut problems = Vec::new();
    if !missing.is_empty() || !stale.is_empty() {
        problems.push(format!(
            "the table must name every top-level module once: not in the table \
             {missing:?}, in the table but not in broker/src {stale:?}"
        ));
    }

    let lib = fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let declared: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("pub mod ")
                .or_else(|| l.trim().strip_prefix("mod "))
        })
        .map(|m| m.trim_end_matches(';').trim().to_owned())
        .collect();
    if declared != present {
        problems.push(format!(
            "lib.rs declares {declared:?}, broker/src holds {present:?}"
        ));
    }
    let reexports = root_reexports(&lib);

    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let texts: HashMap<PathBuf, String> = files
        .iter()
        .map(|f| (f.clone(), fs::read_to_string(f).expect("readable source")))
        .collect();
    let tests = test_only(&files, &texts);

    let mut wrong: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut long = Vec::new();
    for f in &files {
        if tests.contains(f) {
            continue;
        }
        let rel = f.strip_prefix(&src).expect("under src");
        let text = &texts[f];
        if text.lines().count() > MAX_LINES {
            long.push(format!(
                "{} ({} lines)",
                rel.display(),
                text.lines().count()
            ));
        }
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_owned())
            .expect("a first component");
        if top == "lib" || top == "main" {
            continue;
        }
        let Some(&(from_layer, from_index)) = place.get(top.as_str()) else {
            continue; // not in the table: reported above
        };
        for target in crate_refs(&code_of(text)) {
            let target = reexports.get(&target).cloned().unwrap_or(target);
            if target == top {
                continue;
            }
            let Some(&(to_layer, to_index)) = place.get(target.as_str()) else {
                continue; // a macro or a name that is no module
            };
            let ok = to_layer < from_layer
                || (to_layer == from_layer && layers[from_layer].ordered && to_index < from_index);
            if !ok {
                wrong
                    .entry(format!(
                        "{top} ({}) -> {target} ({})",
                        layers[from_layer].name, layers[to_layer].name
                    ))
                    .or_default()
                    .insert(rel.display().to_string());
            }
        }
    }
    if !long.is_empty() {
        problems.push(format!("source files past {MAX_LINES} lines: {long:?}"));
    }
    for (edge, files) in &wrong {
        let files: Vec<&str> = files.iter().map(String::as_str).collect();
        problems.push(format!("{edge}: {}", files.join(", ")));
    }
    assert!(
        problems.is_empty(),
        "against the layer table (docs/architecture.md):\n{}",
        problems.join("\n")
    );
}

#[test]
fn crate_refs_read_paths_and_groups() {
    let code = "use crate::a::X;\nuse crate::{b::Y, c, d::{e, f}};\nfn g() { crate::h::i(); $crate::j::k(); }";
    let refs: Vec<String> = crate_refs(code).into_iter().collect();
    assert_eq!(refs, ["a", "b", "c", "d", "h"]);
    let code = code_of(
        "use crate::a; // crate::b\n#[cfg(test)]\nmod tests {\n use crate::c;\n}\nuse crate::d;",
    );
    let refs: Vec<String> = crate_refs(&code).into_iter().collect();
    assert_eq!(refs, ["a", "d"]);
}

/// Where a line of code parses the `Authorization` header's Bearer scheme
/// itself: a string literal that is the scheme's name (`"Bearer"`,
/// `"bearer "`, any case), as a comparison or a prefix strip would hold
/// it. The subprotocol's `bearer.<token>` is another carrier, not the
/// scheme.
fn parses_bearer(line: &str) -> bool {
    line.split('"').skip(1).step_by(2).any(|lit| {
        let lit = lit.to_ascii_lowercase();
        lit == "bearer" || lit.starts_with("bearer ") || lit.starts_with("bearer\\t")
    })
}

/// Where a line of code compares a price with the plan's `max_single` (the
/// field, not GraphQL's `graphql_max_single` or a method of that name).
fn compares_max_single(line: &str) -> bool {
    let field = line.match_indices("max_single").any(|(at, _)| {
        !line[..at].ends_with("graphql_") && !line[at + "max_single".len()..].starts_with('(')
    });
    field
        && [" > ", " < ", " >= ", " <= "]
            .iter()
            .any(|op| line.contains(op))
}

/// Where a line of code asks whether the subscription cap is in dry run:
/// the cap's decision is `admission::subscription_cap`'s.
fn tests_cap_dry_run(line: &str) -> bool {
    line.contains("LimitName::Subscriptions")
}

/// Where a line of code prices recovered history itself: a call of
/// `pricing::recovery` (or an import of it), which only recovery's one
/// meaning, `charge/recovery.rs`, may make.
fn prices_recovery(line: &str) -> bool {
    line.contains("pricing::recovery") || (line.contains("pricing::{") && line.contains("recovery"))
}

/// Issue 42: recovery had three meanings (owed on a socket, refusable on
/// gRPC, refused with `RATE_LIMITED` on graphql-ws). Its price is computed
/// and charged in one place, `charge::recovery` (`Ledger::recovery`), that
/// every front calls; a front computing `pricing::recovery` itself is how
/// the meanings drifted apart.
#[test]
fn recovery_is_priced_in_one_place() {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let texts: HashMap<PathBuf, String> = files
        .iter()
        .map(|f| (f.clone(), fs::read_to_string(f).expect("readable source")))
        .collect();
    let tests = test_only(&files, &texts);
    let home = Path::new("charge").join("recovery.rs");
    let mut copies = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).expect("under src");
        if tests.contains(f) || rel == home || rel == Path::new("pricing.rs") {
            continue;
        }
        for (n, line) in code_of(&texts[f]).lines().enumerate() {
            if prices_recovery(line) {
                copies.push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        copies.is_empty(),
        "recovered history is priced and charged by charge::recovery (Ledger::recovery) alone:\n{}",
        copies.join("\n")
    );
    assert!(prices_recovery(
        "let units = crate::pricing::recovery(&caller.limits.costs, bytes);"
    ));
    assert!(prices_recovery("use crate::pricing::{publish, recovery};"));
    assert!(!prices_recovery(
        "let units = crate::pricing::subscribe(c, since);"
    ));
}

/// Issue 42's one-place rules: every front reads `Authorization` through
/// `admission::bearer`, compares a price with `max_single` through
/// `admission::check_single` and decides the subscription cap (and its
/// dry run) through `admission::subscription_cap`; a copy anywhere else
/// is how the fronts drifted apart (seven Bearer parsers, five
/// `max_single` checks, gRPC refusing in dry run what the others let
/// through).
#[test]
fn admission_rules_live_in_one_place() {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let texts: HashMap<PathBuf, String> = files
        .iter()
        .map(|f| (f.clone(), fs::read_to_string(f).expect("readable source")))
        .collect();
    let tests = test_only(&files, &texts);
    let mut copies = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).expect("under src");
        // `config/` checks the limit's own value (`max_single <= burst`),
        // which is no price compared with it.
        if tests.contains(f) || rel.starts_with("admission") {
            continue;
        }
        let config = rel.starts_with("config");
        for (n, line) in code_of(&texts[f]).lines().enumerate() {
            if parses_bearer(line) {
                copies.push(format!(
                    "{}:{}: a Bearer parse: {}",
                    rel.display(),
                    n + 1,
                    line.trim()
                ));
            }
            if !config && tests_cap_dry_run(line) {
                copies.push(format!(
                    "{}:{}: a subscription-cap dry-run test: {}",
                    rel.display(),
                    n + 1,
                    line.trim()
                ));
            }
            if !config && compares_max_single(line) {
                copies.push(format!(
                    "{}:{}: a max_single comparison: {}",
                    rel.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        copies.is_empty(),
        "the admission's rules belong in broker/src/admission/ \
         (admission::bearer, admission::check_single, admission::subscription_cap):\n{}",
        copies.join("\n")
    );
}

#[test]
fn the_one_place_checks_see_the_copies_issue_42_found() {
    assert!(parses_bearer(r#"let t = v.strip_prefix("Bearer ")?;"#));
    assert!(parses_bearer(
        r#"if !scheme.eq_ignore_ascii_case("bearer") {"#
    ));
    assert!(!parses_bearer(r#"const BEARER_PREFIX: &str = "bearer.";"#));
    assert!(!parses_bearer(
        r#"message: "send `Authorization: Bearer <api key>`","#
    ));
    assert!(tests_cap_dry_run(
        "let over_cap = n > max && limits.is_dry_run(LimitName::Subscriptions);"
    ));
    assert!(compares_max_single("    if cost > c.max_single {"));
    assert!(compares_max_single("if price <= limits.costs.max_single {"));
    assert!(!compares_max_single("if cost > graphql_max_single {"));
    assert!(!compares_max_single("let max = caller.max_single(share);"));
    assert!(!compares_max_single(
        "max_single: Some(limits.costs.max_single),"
    ));
}
