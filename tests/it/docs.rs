//! The docs cannot drift from the code (docs/development.md, "Docs that cannot drift"). For
//! README.md, ARCHITECTURE.md and every file of docs/: each `callsync …` command line of a shell
//! block parses with the binary's own definition (`callsync::cli::command()`), and so do the
//! systemd units' Exec lines; each command and option an inline `callsync …` names exists; each
//! configuration key they name is one the loader takes, and a whole configuration loads; each
//! relative link leads to a file and a heading; each file of docs/ opens with a contents list;
//! the schema version is the newest migration's; docs/figures.md is `.ci/figures`'s for this
//! release profile; README's test command is the one `.ci/run` runs; and the blocks marked
//! `<!-- doc-check: runs -->` run.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use callsync::config::{ConfigErrorKind, Env};
use clap::error::{ContextKind, ErrorKind};

const RUNS: &str = "<!-- doc-check: runs -->";
const TEST_COMMAND: &str = "<!-- doc-check: the test command -->";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A Markdown file of the docs, its path relative to the repository.
struct Doc {
    path: PathBuf,
    text: String,
}

fn docs() -> Vec<Doc> {
    let mut paths = vec![PathBuf::from("README.md"), PathBuf::from("ARCHITECTURE.md")];
    let mut in_docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("an entry of docs/").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .map(|path| Path::new("docs").join(path.file_name().expect("a name")))
        .collect();
    in_docs.sort();
    paths.extend(in_docs);
    paths
        .into_iter()
        .map(|path| Doc {
            text: std::fs::read_to_string(root().join(&path)).expect("a doc"),
            path,
        })
        .collect()
}

/// A fenced block: its info string, its text, the line it starts on, and the marker comment
/// on the line before it, if any.
struct Block {
    info: String,
    body: String,
    line: usize,
    marker: Option<String>,
}

/// The fenced blocks of `text`, and its prose (the lines outside them, blanked inside).
fn split(text: &str) -> (Vec<Block>, String) {
    let mut blocks = Vec::new();
    let mut prose = String::new();
    let mut open: Option<Block> = None;
    let mut previous = "";
    for (number, line) in text.lines().enumerate() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Block {
                    info: info.trim().to_owned(),
                    body: String::new(),
                    line: number + 1,
                    marker: previous
                        .starts_with("<!-- doc-check:")
                        .then(|| previous.to_owned()),
                });
                prose.push('\n');
            }
            (Some(_), Some(_)) => {
                blocks.extend(open.take());
                prose.push('\n');
            }
            (Some(block), None) => {
                block.body.push_str(line);
                block.body.push('\n');
                prose.push('\n');
            }
            (None, None) => {
                prose.push_str(line);
                prose.push('\n');
            }
        }
        previous = line;
    }
    assert!(open.is_none(), "a fenced block is never closed");
    (blocks, prose)
}

/// The inline code spans of prose (a table's `\|` is a `|`).
fn spans(prose: &str) -> Vec<String> {
    prose
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|span| span.replace("\\|", "|"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Shell: words and simple commands, enough of sh for the docs' blocks.

/// A word of a command line; `placeholder` when it holds an expansion (`$X`, `$(…)`) or stands
/// for a value the reader fills in (`<uid>`, `UID`, `…`).
#[derive(Debug, Clone)]
struct Word {
    text: String,
    placeholder: bool,
}

/// The simple commands of a shell line, each as its words; the text of every `$(…)` is
/// returned too, to be read the same way.
fn simple_commands(line: &str) -> (Vec<Vec<Word>>, Vec<String>) {
    let mut commands = vec![Vec::new()];
    let mut inner = Vec::new();
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let mut skip_next_word = false;
    while i < chars.len() {
        let c = chars[i];
        let word_start = i == 0 || chars[i - 1].is_whitespace();
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' && word_start {
            break;
        } else if matches!(c, '|' | ';' | '&' | '(' | ')') {
            commands.push(Vec::new());
            i += 1;
        } else if word_start && (matches!(c, '<' | '>') || redirect_at(&chars, i)) {
            // A redirection: its target is no argument.
            while i < chars.len()
                && !chars[i].is_whitespace()
                && matches!(chars[i], '<' | '>' | '&' | '0'..='9')
            {
                i += 1;
            }
            skip_next_word = i >= chars.len() || chars[i].is_whitespace();
            if !skip_next_word {
                let (_, end) = word_at(&chars, i, &mut inner);
                i = end;
            }
        } else {
            let (word, end) = word_at(&chars, i, &mut inner);
            i = end;
            if std::mem::take(&mut skip_next_word) {
                continue;
            }
            commands.last_mut().expect("a command").push(word);
        }
    }
    commands.retain(|words| !words.is_empty());
    (commands, inner)
}

/// `2>`, `2>&1`, `&>`: a redirection that starts with a digit.
fn redirect_at(chars: &[char], i: usize) -> bool {
    chars[i].is_ascii_digit() && chars.get(i + 1) == Some(&'>')
}

/// The word starting at `i` and where it ends; `$(…)` texts go to `inner`.
fn word_at(chars: &[char], mut i: usize, inner: &mut Vec<String>) -> (Word, usize) {
    let mut text = String::new();
    let mut placeholder = false;
    let mut quote: Option<char> = None;
    while i < chars.len() {
        let c = chars[i];
        match (quote, c) {
            (None, c) if c.is_whitespace() || matches!(c, '|' | ';' | '&' | ')' | '(') => break,
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => text.push(c),
            (_, '$') if chars.get(i + 1) == Some(&'(') => {
                let end = closing_paren(chars, i + 1);
                inner.push(chars[i + 2..end].iter().collect());
                text.push_str("$(…)");
                placeholder = true;
                i = end;
            }
            (_, '$') => {
                placeholder = true;
                text.push(c);
            }
            (_, '\\') if i + 1 < chars.len() => {
                i += 1;
                text.push(chars[i]);
            }
            (_, c) => text.push(c),
        }
        i += 1;
    }
    let placeholder = placeholder || stands_for_a_value(&text);
    (Word { text, placeholder }, i)
}

/// The index of the `)` closing the `(` at `open`, quotes and nesting considered.
fn closing_paren(chars: &[char], open: usize) -> usize {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for (i, &c) in chars.iter().enumerate().skip(open) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    panic!(
        "no closing parenthesis in {:?}",
        chars.iter().collect::<String>()
    );
}

/// A word a reader replaces: `<schedule-uid>`, `UID`, `FILE.csv`, `…`.
fn stands_for_a_value(text: &str) -> bool {
    text.contains('<') && text.contains('>')
        || text.contains('…')
        || (text.len() > 1 || text == "T" || text == "N" || text == "F")
            && text.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && text
                .chars()
                .take_while(|c| *c != '.')
                .all(|c| c.is_ascii_uppercase() || c == '_' || c == '+')
}

/// The lines of a shell block as sh reads them: continuations joined, here-documents dropped.
fn shell_lines(body: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut pending = String::new();
    let mut here_document: Option<String> = None;
    for line in body.lines() {
        if let Some(end) = &here_document {
            if line.trim() == end {
                here_document = None;
            }
            continue;
        }
        if let Some(stripped) = line.strip_suffix('\\') {
            pending.push_str(stripped);
            continue;
        }
        pending.push_str(line);
        let full = std::mem::take(&mut pending);
        if let Some(at) = full.find("<<") {
            let end = full[at + 2..]
                .trim_start_matches('-')
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .trim_matches(['\'', '"']);
            here_document = Some(end.to_owned());
        }
        lines.push(full);
    }
    lines
}

/// The arguments after `callsync` when `words` run callsync: behind environment assignments,
/// `sudo` and its options, a crontab line's five time fields, or as `cargo run --release --`.
fn callsync_args(words: &[Word]) -> Option<Vec<Word>> {
    let mut rest = words;
    while rest.first().is_some_and(|w| is_assignment(&w.text)) {
        rest = &rest[1..];
    }
    if rest.first().is_some_and(|w| w.text == "sudo") {
        rest = &rest[1..];
        while let Some(option) = rest.first().filter(|w| w.text.starts_with('-')) {
            let takes_value = matches!(option.text.as_str(), "-u" | "-g" | "--user" | "--group");
            rest = &rest[if takes_value { 2 } else { 1 }.min(rest.len())..];
        }
    }
    let time_field = |w: &Word| {
        w.text
            .chars()
            .all(|c| c.is_ascii_digit() || "*/,-".contains(c))
    };
    if rest.len() > 5 && rest[..5].iter().all(time_field) {
        rest = &rest[5..];
    }
    let texts: Vec<&str> = rest.iter().map(|w| w.text.as_str()).collect();
    match texts.as_slice() {
        ["cargo", "run", "--release", "--", ..] => Some(rest[4..].to_vec()),
        [first, ..] if *first == "callsync" || first.ends_with("/callsync") => {
            Some(rest[1..].to_vec())
        }
        _ => None,
    }
}

fn is_assignment(text: &str) -> bool {
    text.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Every callsync command line of a shell block, `$(…)` included.
fn callsync_lines(body: &str) -> Vec<Vec<Word>> {
    let mut found = Vec::new();
    let mut queue = shell_lines(body);
    while let Some(line) = queue.pop() {
        let (commands, inner) = simple_commands(&line);
        queue.extend(inner);
        found.extend(commands.iter().filter_map(|words| callsync_args(words)));
    }
    found
}

// ---------------------------------------------------------------------------------------------
// Command lines against the binary's definition.

/// The values tried in place of the placeholder at `index`, until the definition takes one:
/// each differs from every other placeholder's, so an error names the one it is about.
fn samples(index: usize) -> [String; 5] {
    [
        format!("0b2e7a55-7777-4c0b-9f39-0d3c5a3f2b{index:02}"),
        format!("2026-11-01T00:00:{index:02}Z"),
        format!("{}", index + 1),
        "bash".to_owned(),
        format!("x{index}"),
    ]
}

/// Parses `args` as `callsync ARGS` would: placeholders become a value their option takes.
fn parse(args: &[Word]) -> Result<(), String> {
    let mut texts: Vec<String> = args.iter().map(|w| w.text.clone()).collect();
    let placeholders: Vec<usize> = (0..args.len()).filter(|&i| args[i].placeholder).collect();
    for _ in 0..=placeholders.len() * 5 {
        let line = std::iter::once("callsync".to_owned()).chain(texts.clone());
        let error = match callsync::cli::command().try_get_matches_from(line) {
            Ok(_) => return Ok(()),
            Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
                return Ok(());
            }
            Err(e) => e,
        };
        let bad = error
            .get(ContextKind::InvalidValue)
            .map(ToString::to_string);
        let Some(at) = placeholders
            .iter()
            .copied()
            .find(|&i| Some(&texts[i]) == bad.as_ref())
        else {
            return Err(error.render().to_string());
        };
        let samples = samples(at);
        let next = samples
            .iter()
            .position(|s| *s == texts[at])
            .map_or(0, |t| t + 1);
        match samples.get(next) {
            Some(sample) => texts[at] = sample.clone(),
            None => return Err(error.render().to_string()),
        }
    }
    Err("no sample value fits the placeholders".to_owned())
}

/// An inline `callsync …`, a synopsis rather than a command line: each command it names
/// exists (`set/reset` and `show|set` name each), and each option on the command named.
fn check_inline(words: &[&str]) -> Result<(), String> {
    let mut root = callsync::cli::command();
    root.build();
    let mut current = vec![root];
    let mut naming_commands = true;
    let mut skip_value = false;
    for word in words {
        let text = word.trim_matches(['[', ']', '.', ',', '…']);
        if std::mem::take(&mut skip_value) || text.is_empty() {
            continue;
        }
        if let Some(option) = text
            .strip_prefix('-')
            .map(|_| text.split('=').next().unwrap_or(text))
        {
            if !current.iter().all(|c| find_option(c, option).is_some()) {
                return Err(format!("no option {option}"));
            }
            skip_value = !text.contains('=')
                && current
                    .iter()
                    .all(|c| find_option(c, option).is_some_and(|a| a.get_action().takes_values()));
            continue;
        }
        if stands_for_a_value(text) {
            // `COMMAND`, `UID`: any command, or a value; no command's name follows.
            naming_commands = false;
            continue;
        }
        if naming_commands && current[0].has_subcommands() {
            let mut subs = Vec::new();
            for command in &current {
                for name in text.split(['/', '|']) {
                    let sub = command
                        .find_subcommand(name)
                        .ok_or_else(|| format!("no command {name}"))?;
                    subs.push(sub.clone());
                }
            }
            current = subs;
            continue;
        }
        // A value: what follows is no longer a command's name.
        naming_commands = false;
    }
    Ok(())
}

/// The words of an inline synopsis, up to a shell redirection or pipe.
fn synopsis_words(text: &str) -> Vec<&str> {
    text.split_whitespace()
        .take_while(|w| !matches!(*w, "|" | ">" | "2>" | ";" | "&&" | "||") && !w.starts_with('>'))
        .collect()
}

/// The argument `option` (`--long`, `-s`, `-vv`) names on `command`.
fn find_option<'c>(command: &'c clap::Command, option: &str) -> Option<&'c clap::Arg> {
    let matches = |arg: &&clap::Arg| match option.strip_prefix("--") {
        Some(long) => arg.get_long() == Some(long),
        None => option.len() > 1 && option[1..].chars().all(|c| arg.get_short() == Some(c)),
    };
    command.get_arguments().find(matches)
}

#[test]
fn every_callsync_command_line_in_the_docs_parses() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for doc in docs() {
        let (blocks, prose) = split(&doc.text);
        for block in blocks
            .iter()
            .filter(|b| matches!(b.info.as_str(), "sh" | "bash"))
        {
            for args in callsync_lines(&block.body) {
                checked += 1;
                if let Err(e) = parse(&args) {
                    failures.push(format!(
                        "{}:{}: callsync {}: {e}",
                        doc.path.display(),
                        block.line,
                        show(&args)
                    ));
                }
            }
        }
        for span in spans(&prose) {
            let Some(rest) = span.strip_prefix("callsync ") else {
                continue;
            };
            checked += 1;
            if let Err(e) = check_inline(&synopsis_words(rest)) {
                failures.push(format!("{}: `{span}`: {e}", doc.path.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        checked > 100,
        "only {checked} command lines found: the reader is broken"
    );
}

fn show(args: &[Word]) -> String {
    args.iter()
        .map(|w| w.text.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The units run callsync as the docs say: their Exec lines parse too.
#[test]
fn the_systemd_units_exec_lines_parse() {
    for unit in ["callsync.service", "callsync-backfill@.service"] {
        let text = std::fs::read_to_string(root().join("systemd").join(unit)).expect("a unit");
        let execs: Vec<&str> = text
            .lines()
            .filter_map(|l| {
                l.split_once('=')
                    .filter(|(k, _)| k.starts_with("Exec"))
                    .map(|(_, v)| v)
            })
            .collect();
        assert!(!execs.is_empty(), "{unit}");
        for exec in execs {
            // systemd's own: `-` (a failure is no failure), `%i` (the instance), an empty
            // $BACKFILL_ARGS.
            let line = exec
                .trim_start_matches('-')
                .replace("%i", &samples(0)[0])
                .replace("$BACKFILL_ARGS", "");
            let (commands, _) = simple_commands(&line);
            let args = callsync_args(&commands[0]).unwrap_or_else(|| panic!("{unit}: {exec}"));
            parse(&args).unwrap_or_else(|e| panic!("{unit}: {exec}: {e}"));
        }
    }
}

/// Each top-level command is in the reference.
#[test]
fn docs_commands_names_every_command() {
    let text = std::fs::read_to_string(root().join("docs/commands.md")).expect("docs/commands.md");
    let (_, prose) = split(&text);
    let named: BTreeSet<String> = spans(&prose)
        .iter()
        .filter_map(|s| s.strip_prefix("callsync "))
        .filter_map(|rest| rest.split_whitespace().next().map(str::to_owned))
        .collect();
    for sub in callsync::cli::command().get_subcommands() {
        assert!(
            named.contains(sub.get_name()),
            "docs/commands.md does not name `callsync {}`",
            sub.get_name()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration keys.

const SECTIONS: [&str; 6] = ["api", "warehouse", "sync", "log", "metrics", "backup"];

/// The key an inline span names: `sync.page_size`, `warehouse.path = "…"`, `[api.oauth]`,
/// `[backup] dir`, `[[sync.schedule]] name`, `[log] format = "json"`.
fn key_of_span(span: &str) -> Option<String> {
    let span = span.split(" = ").next().unwrap_or(span).trim();
    let (table, key) = match span.strip_prefix('[') {
        Some(rest) => {
            let (table, after) = rest.trim_start_matches('[').split_once(']')?;
            (
                table.to_owned(),
                after.trim_start_matches(']').trim().to_owned(),
            )
        }
        None => (span.to_owned(), String::new()),
    };
    let dotted = if key.is_empty() {
        table
    } else {
        format!("{table}.{key}")
    };
    let section = dotted.split('.').next()?;
    let well_formed = dotted.split('.').all(|part| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    });
    let file_name = ["rs", "md", "toml", "sql", "json", "yml", "db"]
        .iter()
        .any(|ext| dotted.ends_with(&format!(".{ext}")));
    (SECTIONS.contains(&section)
        && well_formed
        && !file_name
        && (dotted.contains('.') || span.starts_with('[')))
    .then_some(dotted)
}

fn section_of(key: &str) -> &str {
    key.split('.').next().unwrap_or(key)
}

/// The dotted keys a TOML block sets, through tables and arrays of tables.
fn keys_of_toml(text: &str) -> Result<Vec<String>, String> {
    let table = toml::de::DeTable::parse(text).map_err(|e| e.message().to_owned())?;
    let mut keys = Vec::new();
    collect(table.get_ref(), "", &mut keys);
    Ok(keys)
}

fn collect(table: &toml::de::DeTable<'_>, prefix: &str, keys: &mut Vec<String>) {
    for (key, value) in table {
        let key = match prefix {
            "" => key.get_ref().to_string(),
            _ => format!("{prefix}.{}", key.get_ref()),
        };
        match value.get_ref() {
            toml::de::DeValue::Table(inner) => collect(inner, &key, keys),
            toml::de::DeValue::Array(items) => {
                for item in items {
                    if let toml::de::DeValue::Table(inner) = item.get_ref() {
                        collect(inner, &key, keys);
                    }
                }
            }
            _ => {}
        }
        keys.push(key);
    }
}

/// What the loader says of a file setting `key` alone (and of `vars`): an unknown key is
/// `UnknownKey`; a known one loads or fails for another reason (its value "x", a key missing).
fn load_kind(key: Option<&str>, vars: &[(&str, &str)]) -> Option<ConfigErrorKind> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("callsync.toml");
    let text = key.map_or(String::new(), |key| format!("{key} = \"x\"\n"));
    std::fs::write(&path, text).expect("written");
    let env = Env {
        vars: vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        credentials_dir: None,
    };
    callsync::config::load_from(Some(&path), &env)
        .err()
        .map(|e| e.kind())
}

/// `CALLSYNC_SYNC__PAGE_SIZE` → `sync.page_size`; `None` for the variables that set no key.
fn key_of_variable(name: &str) -> Option<String> {
    let rest = name.strip_prefix("CALLSYNC_")?;
    rest.contains("__")
        .then(|| rest.to_lowercase().replace("__", "."))
}

#[test]
fn every_configuration_key_the_docs_name_exists() {
    // The checks can fail: an unknown key and an unknown variable are told apart.
    assert_eq!(
        load_kind(Some("sync.page_sise"), &[]),
        Some(ConfigErrorKind::UnknownKey)
    );
    assert_eq!(
        load_kind(None, &[("CALLSYNC_SYNC__PAGE_SISE", "1")]),
        Some(ConfigErrorKind::UnknownKey)
    );
    assert_ne!(
        load_kind(Some("sync.page_size"), &[]),
        Some(ConfigErrorKind::UnknownKey)
    );

    let mut failures = Vec::new();
    let mut keys = BTreeSet::new();
    let mut variables = BTreeSet::new();
    for doc in docs() {
        let (blocks, prose) = split(&doc.text);
        keys.extend(spans(&prose).iter().filter_map(|s| key_of_span(s)));
        variables.extend(variables_in(&doc.text));
        for block in blocks.iter().filter(|b| b.info == "toml") {
            match keys_of_toml(&block.body) {
                // Another program's TOML (Cargo.toml's profile in docs/figures.md).
                Ok(found) if found.iter().all(|k| !SECTIONS.contains(&section_of(k))) => {}
                Ok(found) => keys.extend(found),
                Err(e) => failures.push(format!(
                    "{}:{}: not TOML: {e}",
                    doc.path.display(),
                    block.line
                )),
            }
            if block.body.contains("[api]") {
                whole_configuration_loads(&doc.path, block, &mut failures);
            }
        }
    }
    for key in &keys {
        if load_kind(Some(key), &[]) == Some(ConfigErrorKind::UnknownKey) {
            failures.push(format!(
                "the docs name the key {key}, which callsync does not have"
            ));
        }
    }
    for name in &variables {
        match key_of_variable(name) {
            Some(_) if load_kind(None, &[(name, "x")]) == Some(ConfigErrorKind::UnknownKey) => {
                failures.push(format!("the docs name {name}, which sets no key"));
            }
            Some(_) => {}
            None if !read_by_the_tools(name) => {
                failures.push(format!(
                    "the docs name {name}, which neither callsync nor its tools read"
                ));
            }
            None if name != "CALLSYNC_CONFIG" && !callsync_ignores(name) => {
                // Set as the docs say (`CALLSYNC_SKIP_DATASETTE=1 .ci/run`), it is inherited
                // by every callsync the tests run.
                failures.push(format!("callsync refuses {name}=1, a switch of its tools"));
            }
            None => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        keys.len() > 40,
        "only {} keys found: the reader is broken",
        keys.len()
    );
}

/// The `CALLSYNC_…` names in `text` (`CALLSYNC_<SECTION>__<KEY>` and `CALLSYNC_*` are no names).
fn variables_in(text: &str) -> Vec<String> {
    text.match_indices("CALLSYNC_")
        .map(|(at, _)| {
            text[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| name.len() > "CALLSYNC_".len() && !name.ends_with("__"))
        .collect()
}

/// `CALLSYNC_CONFIG`, or a switch a script of .ci/, the tests or the benchmarks read.
fn read_by_the_tools(name: &str) -> bool {
    if name == "CALLSYNC_CONFIG" {
        return true;
    }
    let mut files = vec![root().join("src/config/env.rs")];
    for dir in [".ci", "tests/it", "benches", "benches/common"] {
        if let Ok(entries) = std::fs::read_dir(root().join(dir)) {
            files.extend(
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.is_file()),
            );
        }
    }
    files
        .iter()
        .filter(|f| !f.ends_with("docs.rs"))
        .any(|file| {
            std::fs::read_to_string(file).is_ok_and(|text| {
                text.contains(&format!("\"{name}\""))
                    || text.contains(&format!("{name}:-"))
                    || text.contains(&format!("${{{name}"))
            })
        })
}

/// Whether callsync runs with `name=1` in its environment, as with none.
fn callsync_ignores(name: &str) -> bool {
    let example = root().join("config/callsync.example.toml");
    Command::new(env!("CARGO_BIN_EXE_callsync"))
        .arg("--config")
        .arg(example)
        .arg("config")
        .env(name, "1")
        .env_remove("CREDENTIALS_DIRECTORY")
        .output()
        .expect("callsync runs")
        .status
        .success()
}

fn whole_configuration_loads(doc: &Path, block: &Block, failures: &mut Vec<String>) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("callsync.toml");
    std::fs::write(&path, &block.body).expect("written");
    if let Err(e) = callsync::config::load_from(Some(&path), &Env::default()) {
        failures.push(format!(
            "{}:{}: the configuration does not load: {e}",
            doc.display(),
            block.line
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// Links, contents, figures.

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown text's headings (a repeated one gets `-1`, `-2`, …).
fn anchors(text: &str) -> BTreeSet<String> {
    let (_, prose) = split(text);
    let mut seen = BTreeSet::new();
    for line in prose.lines() {
        let Some(heading) = line.strip_prefix('#').map(|h| h.trim_start_matches('#')) else {
            continue;
        };
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The targets of `[text](target)` links in prose.
fn links(prose: &str) -> Vec<String> {
    prose
        .match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &prose[at + 2..];
            rest.find(')').map(|end| rest[..end].to_owned())
        })
        .collect()
}

#[test]
fn every_relative_link_leads_to_a_file_and_a_heading() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for doc in docs() {
        let (_, prose) = split(&doc.text);
        let prose: String = prose.split('`').step_by(2).collect::<Vec<_>>().join("");
        for target in links(&prose) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let base = doc.path.parent().unwrap_or(Path::new(""));
            let path = if file.is_empty() {
                doc.path.clone()
            } else {
                base.join(file)
            };
            let Ok(text) = std::fs::read_to_string(root().join(&path)) else {
                if !root().join(&path).is_dir() {
                    failures.push(format!("{}: {target}: no such file", doc.path.display()));
                }
                continue;
            };
            if !anchor.is_empty() && !anchors(&text).contains(anchor) {
                failures.push(format!(
                    "{}: {target}: no such heading in {}",
                    doc.path.display(),
                    path.display()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        checked > 100,
        "only {checked} links found: the reader is broken"
    );
}

#[test]
fn every_file_of_docs_opens_with_its_contents() {
    for doc in docs().iter().filter(|d| d.path.starts_with("docs")) {
        let (_, prose) = split(&doc.text);
        let before_first_section = prose.split("\n## ").next().unwrap_or_default();
        let contents: BTreeSet<String> = before_first_section
            .lines()
            .filter_map(|l| {
                l.trim_start()
                    .strip_prefix("- [")
                    .and_then(|l| l.split_once("](#"))
            })
            .map(|(_, anchor)| anchor.trim_end_matches(')').to_owned())
            .collect();
        for line in prose.lines() {
            if let Some(heading) = line.strip_prefix("## ") {
                assert!(
                    contents.contains(&slug(heading)),
                    "{}: its contents list, before the first section, lacks {heading:?}",
                    doc.path.display()
                );
            }
        }
        assert!(
            !contents.is_empty(),
            "{}: no contents list",
            doc.path.display()
        );
    }
}

#[test]
fn the_schema_version_the_docs_state_is_the_newest_migrations() {
    let newest = std::fs::read_dir(root().join("migrations"))
        .expect("migrations/")
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .count();
    let mut stated = 0;
    for doc in docs() {
        for (at, _) in doc.text.match_indices("The schema (version ") {
            let version: String = doc.text[at + 20..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            assert_eq!(version, newest.to_string(), "{}", doc.path.display());
            stated += 1;
        }
    }
    assert!(stated > 0, "no doc states the schema version");
}

/// The `[profile.release]` table as written in `text` (Cargo.toml, or the figures' copy).
fn release_profile(text: &str) -> Option<String> {
    let start = text.find("[profile.release]\n")?;
    let table: Vec<&str> = text[start..]
        .lines()
        .enumerate()
        .take_while(|(i, l)| {
            *i == 0 || !(l.is_empty() || l.starts_with('[') || l.starts_with("```"))
        })
        .map(|(_, l)| l)
        .collect();
    Some(table.join("\n"))
}

#[test]
fn the_figures_are_the_scripts_for_this_release_profile() {
    let figures = std::fs::read_to_string(root().join("docs/figures.md")).expect("docs/figures.md");
    assert!(
        figures.contains("<!-- Written by .ci/figures: do not edit."),
        "docs/figures.md is written by .ci/figures"
    );
    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    assert_eq!(
        release_profile(&figures),
        release_profile(&cargo),
        "Cargo.toml's [profile.release] changed since the figures were measured: run .ci/figures"
    );
    // The figure is the file's alone: no other doc types the size.
    let size = figures
        .lines()
        .find(|l| l.starts_with("| size |"))
        .and_then(|l| l.split('(').nth(1))
        .and_then(|l| l.split(' ').next())
        .expect("a size row")
        .to_owned();
    for doc in docs().iter().filter(|d| !d.path.ends_with("figures.md")) {
        assert!(
            !doc.text.contains(&size),
            "{} types the binary's size",
            doc.path.display()
        );
    }
}

#[test]
fn readmes_test_command_is_the_one_ci_runs() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let (blocks, _) = split(&readme);
    let marked: Vec<&Block> = blocks
        .iter()
        .filter(|b| b.marker.as_deref() == Some(TEST_COMMAND))
        .collect();
    assert_eq!(marked.len(), 1, "README.md has one test command");
    assert_eq!(marked[0].body.lines().count(), 1, "{}", marked[0].body);
    let ci = std::fs::read_to_string(root().join(".ci/run")).expect(".ci/run");
    assert!(
        ci.contains(&format!("/^{TEST_COMMAND}$/")),
        ".ci/run reads README's test command"
    );
}

// ---------------------------------------------------------------------------------------------
// Blocks that run.

/// The blocks marked to run, with their doc.
fn runnable(path: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(path)).expect("a doc");
    let (blocks, _) = split(&text);
    blocks
        .into_iter()
        .filter(|b| b.marker.as_deref() == Some(RUNS))
        .map(|b| b.body)
        .collect()
}

/// Runs `script` in bash (errors stop it) in `dir`, this build's callsync first on the PATH,
/// and returns its stdout; every process it started is killed when it ends.
fn run_block(script: &str, dir: &Path) -> String {
    use std::os::unix::process::CommandExt;
    let script = script.replace("cargo run --release -- ", "callsync ");
    let bin = Path::new(env!("CARGO_BIN_EXE_callsync"))
        .parent()
        .expect("bin dir");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("bash");
    command
        .args(["-e", "-o", "pipefail", "-c", &script])
        .current_dir(dir)
        .env("PATH", path)
        .env("TMPDIR", dir)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .env_remove("CREDENTIALS_DIRECTORY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for (name, _) in std::env::vars().filter(|(n, _)| n.starts_with("CALLSYNC_")) {
        command.env_remove(name);
    }
    let child = command.spawn().expect("bash runs");
    let group = child.id() as i32;
    let (done, outcome) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    // A patience only a hang reaches: the blocks take seconds.
    let output = outcome.recv_timeout(std::time::Duration::from_secs(600));
    // SAFETY: kill(2) with the group this test created; no memory is involved.
    unsafe { libc::kill(-group, libc::SIGKILL) };
    let output = output.expect("the block ended").expect("its output");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{script}\nexited {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn readmes_demo_runs_as_written() {
    let blocks = runnable("README.md");
    assert_eq!(blocks.len(), 1, "README has one block that runs: the demo");
    let dir = tempfile::tempdir().expect("a temp dir");
    run_block(&blocks[0], dir.path());
    // What README says it leaves.
    for file in ["demo/callsync.toml", "demo/callsync.db"] {
        assert!(dir.path().join(file).is_file(), "the demo left no {file}");
    }
}

#[test]
fn the_walkthrough_runs_as_written() {
    if Command::new("sqlite3").arg("--version").output().is_err() {
        eprintln!("sqlite3 is not installed (apt-get install sqlite3): the walkthrough is not run");
        return;
    }
    let blocks = runnable("docs/walkthrough.md");
    assert_eq!(blocks.len(), 1, "the walkthrough has one block that runs");
    let dir = tempfile::tempdir().expect("a temp dir");
    let stdout = run_block(&blocks[0], dir.path());
    // The query's rows, plan and calls, as the doc shows them (attempts and answers vary).
    let rows = |text: &str| -> Vec<(String, String)> {
        text.lines()
            .skip_while(|l| !l.starts_with("------"))
            .skip(1)
            .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .map_while(|f| (f.len() == 4).then(|| (f[0].clone(), f[1].clone())))
            .collect()
    };
    let doc = std::fs::read_to_string(root().join("docs/walkthrough.md")).expect("a doc");
    let shown = rows(&doc);
    assert_eq!(
        shown,
        [
            ("gold".to_owned(), "4".to_owned()),
            ("silver".to_owned(), "4".to_owned())
        ]
    );
    assert_eq!(rows(&stdout), shown, "{stdout}");
}

mod reader {
    use super::*;

    fn lines(body: &str) -> Vec<String> {
        callsync_lines(body).iter().map(|args| show(args)).collect()
    }

    #[test]
    fn finds_callsync_behind_sudo_assignments_cron_and_substitutions() {
        let body = "sudo -u callsync callsync --config /etc/c.toml check   # as the user\n\
                    X=$(callsync campaign create --name \"A b\")\n\
                    */10 * * * * callsync -q status > /dev/null\n\
                    journalctl -u callsync -f\n\
                    cargo run --release -- demo\n\
                    callsync backfill --schedule \"$S\" \\\n  --json | jq .x\n\
                    cat > f <<'CSV'\ncallsync not a command\nCSV\n";
        let mut found = lines(body);
        found.sort();
        assert_eq!(
            found,
            [
                "--config /etc/c.toml check",
                "-q status",
                "backfill --schedule $S --json",
                "campaign create --name A b",
                "demo",
            ]
        );
    }

    #[test]
    fn a_wrong_option_or_command_fails() {
        let words = |line: &str| callsync_lines(line).remove(0);
        assert!(parse(&words("callsync sync --schedule \"$S\" --json")).is_ok());
        assert!(parse(&words("callsync sync --schedul x")).is_err());
        assert!(parse(&words("callsync snyc")).is_err());
        assert!(check_inline(&synopsis_words("checkpoint set/reset --force")).is_ok());
        assert!(check_inline(&synopsis_words("checkpoint show|set|reset")).is_ok());
        assert!(check_inline(&synopsis_words("--config PATH -vv status [--json]")).is_ok());
        assert!(check_inline(&synopsis_words("completions bash|zsh")).is_ok());
        assert!(check_inline(&synopsis_words("checkpoint sett")).is_err());
        assert!(check_inline(&synopsis_words("status [--jsn]")).is_err());
        assert!(check_inline(&synopsis_words("snyc")).is_err());
    }

    #[test]
    fn keys_are_read_from_spans() {
        assert_eq!(
            key_of_span("sync.page_size").as_deref(),
            Some("sync.page_size")
        );
        assert_eq!(key_of_span("[backup] dir").as_deref(), Some("backup.dir"));
        assert_eq!(
            key_of_span("[[sync.schedule]] name").as_deref(),
            Some("sync.schedule.name")
        );
        assert_eq!(
            key_of_span("[log] format = \"json\"").as_deref(),
            Some("log.format")
        );
        assert_eq!(key_of_span("[api.oauth]").as_deref(), Some("api.oauth"));
        assert_eq!(key_of_span("metrics.rs"), None);
        assert_eq!(key_of_span("sync_runs.error"), None);
        assert_eq!(key_of_span("sync"), None);
    }

    #[test]
    fn slugs_are_githubs() {
        assert_eq!(slug("Health check: /healthz"), "health-check-healthz");
        assert_eq!(slug("status --json"), "status---json");
        assert_eq!(slug("2. A configuration"), "2-a-configuration");
        assert_eq!(
            slug("Backfill, reconcile and checkpoints"),
            "backfill-reconcile-and-checkpoints"
        );
    }
}

/// docs/postgres.md, "Create the role and the database": a login role that owns its database,
/// and is neither superuser nor allowed to create databases or roles, migrates the warehouse;
/// `contrib/postgres/bi-role.sql`, run by the superuser, then gives `callsync_reader` the views
/// and nothing to write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_postgres_role_and_database_are_enough() {
    if !crate::pg::available("docs::postgres_role") {
        return;
    }
    let server = crate::pg::server();
    let admin = |db: &str, sql: &str| {
        crate::pg::admin(server, db, sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    admin(
        "postgres",
        "CREATE ROLE callsync LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE",
    );
    admin("postgres", "CREATE DATABASE callsync OWNER callsync");
    let as_role = |role: &str| {
        server
            .url("callsync")
            .replacen(&format!("{}@", server.superuser), &format!("{role}@"), 1)
    };
    let dir = tempfile::tempdir().expect("a temp dir");
    let config = dir.path().join("callsync.toml");
    std::fs::write(
        &config,
        format!(
            "[api]\nbase_url = \"https://calls.example.com\"\n[warehouse]\nurl = \"{}\"\n[sync]\nschedules = [\"{}\"]\n",
            as_role("callsync"),
            samples(0)[0]
        ),
    )
    .expect("written");
    let migrated = Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(["--config", config.to_str().expect("UTF-8"), "migrate"])
        .env_remove("RUST_LOG")
        .env_remove("CREDENTIALS_DIRECTORY")
        .output()
        .expect("callsync runs");
    assert!(
        migrated.status.success(),
        "{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    // As docs/postgres.md runs it: psql, naming the owner and the database.
    let (ran, stderr) =
        crate::described::bi_role_script("callsync", &[("owner", "callsync"), ("db", "callsync")]);
    assert!(ran, "bi-role.sql: {stderr}");
    admin(
        "postgres",
        "CREATE ROLE metabase LOGIN IN ROLE callsync_reader",
    );
    let url = as_role("metabase");
    let as_metabase = |sql: &'static str| {
        let url = url.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(connection);
                client.simple_query(sql).await.map(|_| ()).map_err(|e| {
                    e.as_db_error()
                        .map_or(e.to_string(), |d| d.message().to_owned())
                })
            })
        })
        .join()
        .expect("the query thread")
    };
    as_metabase("SELECT count(*) FROM call_results").expect("a reader reads the views");
    let refused = as_metabase("DELETE FROM sync_checkpoints").expect_err("a reader writes nothing");
    assert!(refused.contains("permission denied"), "{refused}");
}
