//! envoyproxy/ratelimit's YAML configuration: parsed, validated and turned
//! into a tree of descriptors, with errors that name the file, the line and
//! the field.
//!
//! The format is the reference service's (its README, "The configuration
//! format"): one `domain` per file and a list of `descriptors`, each with a
//! `key`, an optional `value`, an optional `rate_limit` (`unit` and
//! `requests_per_unit`, or `unlimited: true`; `name` and `replaces`), an
//! optional `shadow_mode` and nested `descriptors`. The reference's keys
//! that ratomic does not implement (`detailed_metric`, `value_to_metric`,
//! `share_threshold`, `quota_mode`, `metadata`, values with a `*` wildcard)
//! are errors that say so, rather than silently doing something else.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use saphyr::{LoadableYamlNode, MarkedYamlOwned, ScalarOwned, YamlDataOwned};

/// The most bytes a configuration file may have: a larger file is an error
/// (the configuration is small; this bounds what a mistaken path can cost).
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// How deep descriptors may nest: deeper is an error (and no request may
/// carry more entries per descriptor than this, see `service.rs`).
pub const MAX_DEPTH: usize = 16;

/// A time unit of a `rate_limit`, as the RLS protocol numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3,600 seconds.
    Hour,
    /// 86,400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days, as envoyproxy/ratelimit counts a month.
    Month,
    /// 365 days, as envoyproxy/ratelimit counts a year.
    Year,
}

impl Unit {
    fn parse(s: &str) -> Option<Unit> {
        Some(match s.to_ascii_lowercase().as_str() {
            "second" => Unit::Second,
            "minute" => Unit::Minute,
            "hour" => Unit::Hour,
            "day" => Unit::Day,
            "week" => Unit::Week,
            "month" => Unit::Month,
            "year" => Unit::Year,
            _ => return None,
        })
    }

    /// The unit's length.
    pub fn duration(self) -> Duration {
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        })
    }

    /// The protocol's number for the unit (`RateLimitResponse.RateLimit.Unit`).
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit's name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }
}

/// What a matched descriptor is subject to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `requests_per_unit` per `unit` (0 refuses every call).
    Rate {
        /// The most hits per unit.
        requests_per_unit: u32,
        /// The unit.
        unit: Unit,
    },
    /// `unlimited: true`: always OK, never counted.
    Unlimited,
}

/// One `rate_limit` block, with the descriptor's flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The limit.
    pub limit: Limit,
    /// `rate_limit.name`, or empty.
    pub name: String,
    /// `rate_limit.replaces[].name`.
    pub replaces: Vec<String>,
    /// `shadow_mode`: an over-limit answer is reported (logs, metrics) but
    /// the descriptor's code stays OK.
    pub shadow_mode: bool,
    /// The rule's path, `domain.key_value.key` as the reference names its
    /// stats: for logs and metrics.
    pub path: String,
    /// Where the rule is written, `file:line: field`, for errors found
    /// when its limiter is built.
    pub origin: String,
}

/// A level of descriptors: children by `key` or by `key` and `value`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    /// `(key, Some(value))` for an exact match, `(key, None)` for any value.
    pub children: HashMap<(String, Option<String>), Node>,
    /// The rule at this level, if any.
    pub rule: Option<Rule>,
}

/// Every domain's descriptor tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Domain name → its top level.
    pub domains: HashMap<String, Node>,
}

/// What a descriptor matched.
#[derive(Debug, PartialEq, Eq)]
pub enum Match<'c> {
    /// No rule: the descriptor is not limited.
    None,
    /// The rule at the descriptor's depth.
    Rule(&'c Rule),
}

impl Config {
    /// Finds the rule for one descriptor's entries in `domain`, the way
    /// envoyproxy/ratelimit does: level by level, `key` and `value` first,
    /// then `key` alone; a rule applies only at the depth of the last entry.
    pub fn lookup<'c, 'e>(&'c self, domain: &str, entries: impl IntoIterator<Item = (&'e str, &'e str)>) -> Match<'c> {
        let Some(mut node) = self.domains.get(domain) else { return Match::None };
        let mut entries = entries.into_iter().peekable();
        while let Some((key, value)) = entries.next() {
            // A lookup by borrowed strings without allocating would need a
            // custom map; descriptors are short and this runs once per entry.
            let exact = node.children.get(&(key.to_owned(), Some(value.to_owned())));
            let next = match exact {
                Some(n) => n,
                None => match node.children.get(&(key.to_owned(), None)) {
                    Some(n) => n,
                    None => return Match::None,
                },
            };
            if entries.peek().is_none() {
                return next.rule.as_ref().map_or(Match::None, Match::Rule);
            }
            node = next;
        }
        Match::None
    }

    /// Every distinct `(requests_per_unit, unit)` of the configuration, with
    /// where one rule of that rate is written.
    pub fn rates(&self) -> Vec<(u32, Unit, String)> {
        fn walk(node: &Node, out: &mut Vec<(u32, Unit, String)>) {
            if let Some(Rule { limit: Limit::Rate { requests_per_unit, unit }, origin, .. }) = &node.rule {
                if !out.iter().any(|(r, u, _)| (r, u) == (requests_per_unit, unit)) {
                    out.push((*requests_per_unit, *unit, origin.clone()));
                }
            }
            for child in node.children.values() {
                walk(child, out);
            }
        }
        let mut out = Vec::new();
        for node in self.domains.values() {
            walk(node, &mut out);
        }
        out
    }
}

/// A configuration error: the file, the line (1-based, 0 when the error is
/// about the whole file), the field and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// The line, 1-based; 0 for the file as a whole.
    pub line: usize,
    /// The field, as a path (`descriptors[0].rate_limit.unit`), or empty.
    pub field: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Reads and validates every file; a domain in two files is an error.
pub fn load_files(paths: &[PathBuf]) -> Result<Config, ConfigError> {
    let mut config = Config::default();
    for path in paths {
        let (domain, node) = load_file(path)?;
        if config.domains.contains_key(&domain) {
            return Err(ConfigError {
                file: path.clone(),
                line: 0,
                field: "domain".into(),
                message: format!("domain {domain:?} is already configured by another file: one file per domain"),
            });
        }
        config.domains.insert(domain, node);
    }
    Ok(config)
}

/// Reads and validates one file.
pub fn load_file(path: &Path) -> Result<(String, Node), ConfigError> {
    let whole = |message: String| ConfigError { file: path.to_owned(), line: 0, field: String::new(), message };
    let meta = std::fs::metadata(path).map_err(|e| whole(format!("cannot read the configuration: {e}")))?;
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(whole(format!("the file has {} bytes, more than the {MAX_CONFIG_BYTES} allowed", meta.len())));
    }
    let text = std::fs::read_to_string(path).map_err(|e| whole(format!("cannot read the configuration: {e}")))?;
    parse(path, &text)
}

/// Parses and validates one file's text (`path` names it in errors).
pub fn parse(path: &Path, text: &str) -> Result<(String, Node), ConfigError> {
    let p = Parser { file: path };
    let docs = MarkedYamlOwned::load_from_str(text).map_err(|e| ConfigError {
        file: path.to_owned(),
        line: e.marker().line(),
        field: String::new(),
        message: format!("not valid YAML: {}", e.info()),
    })?;
    let root = match docs.as_slice() {
        [root] => root,
        [] => return Err(p.err(0, "", "the file is empty: it needs a `domain` and `descriptors`")),
        [_, second, ..] => {
            return Err(p.err(line(second), "", "more than one YAML document: one file holds one domain"));
        }
    };
    let map = p.mapping(root, "")?;
    let mut domain = None;
    let mut descriptors = None;
    for (k, v) in map {
        match k.as_str() {
            "domain" => domain = Some((p.string(v, "domain")?, line(v))),
            "descriptors" => descriptors = Some(v),
            other => {
                return Err(p.err(
                    line(v),
                    other,
                    "unknown key: a file has `domain` and `descriptors` (envoyproxy/ratelimit's format)",
                ))
            }
        }
    }
    let Some((domain, domain_line)) = domain else {
        return Err(p.err(line(root), "domain", "missing: name the domain the descriptors belong to"));
    };
    if domain.is_empty() {
        return Err(p.err(domain_line, "domain", "empty: name the domain the descriptors belong to"));
    }
    let mut top = Node::default();
    if let Some(list) = descriptors {
        p.descriptors(list, "descriptors", &domain, &mut top, 1)?;
    }
    Ok((domain, top))
}

fn line(node: &MarkedYamlOwned) -> usize {
    node.span.start.line()
}

struct Parser<'a> {
    file: &'a Path,
}

impl Parser<'_> {
    fn err(&self, line: usize, field: &str, message: impl Into<String>) -> ConfigError {
        ConfigError { file: self.file.to_owned(), line, field: field.to_owned(), message: message.into() }
    }

    /// A mapping's entries, keys as strings, in the document's order.
    fn mapping<'n>(
        &self,
        node: &'n MarkedYamlOwned,
        field: &str,
    ) -> Result<Vec<(String, &'n MarkedYamlOwned)>, ConfigError> {
        match &node.data {
            YamlDataOwned::Mapping(map) => {
                let mut out = Vec::with_capacity(map.len());
                for (k, v) in map.iter() {
                    let key = self.scalar(k).ok_or_else(|| self.err(line(k), field, "a key must be a plain string"))?;
                    out.push((key, v));
                }
                Ok(out)
            }
            _ => Err(self.err(line(node), field, "expected a mapping (`key: value` lines)")),
        }
    }

    fn scalar(&self, node: &MarkedYamlOwned) -> Option<String> {
        match &node.data {
            YamlDataOwned::Value(ScalarOwned::String(s)) => Some(s.clone()),
            YamlDataOwned::Value(ScalarOwned::Integer(i)) => Some(i.to_string()),
            YamlDataOwned::Value(ScalarOwned::FloatingPoint(f)) => Some(f.to_string()),
            YamlDataOwned::Value(ScalarOwned::Boolean(b)) => Some(b.to_string()),
            YamlDataOwned::Representation(s, _, _) => Some(s.clone()),
            _ => None,
        }
    }

    fn string(&self, node: &MarkedYamlOwned, field: &str) -> Result<String, ConfigError> {
        self.scalar(node).ok_or_else(|| self.err(line(node), field, "expected a string"))
    }

    fn boolean(&self, node: &MarkedYamlOwned, field: &str) -> Result<bool, ConfigError> {
        match &node.data {
            YamlDataOwned::Value(ScalarOwned::Boolean(b)) => Ok(*b),
            _ => Err(self.err(line(node), field, "expected true or false")),
        }
    }

    fn descriptors(
        &self,
        list: &MarkedYamlOwned,
        field: &str,
        parent_path: &str,
        parent: &mut Node,
        depth: usize,
    ) -> Result<(), ConfigError> {
        let items = match &list.data {
            YamlDataOwned::Sequence(items) => items,
            YamlDataOwned::Value(ScalarOwned::Null) => return Ok(()),
            _ => return Err(self.err(line(list), field, "expected a list of descriptors (`- key: ...`)")),
        };
        if depth > MAX_DEPTH {
            return Err(self.err(line(list), field, format!("descriptors nest deeper than {MAX_DEPTH} levels")));
        }
        for (i, item) in items.iter().enumerate() {
            let here = format!("{field}[{i}]");
            let mut key = None;
            let mut value = None;
            let mut rule_node = None;
            let mut shadow_mode = false;
            let mut nested = None;
            for (k, v) in self.mapping(item, &here)? {
                let f = format!("{here}.{k}");
                match k.as_str() {
                    "key" => key = Some((self.string(v, &f)?, line(v))),
                    "value" => value = Some((self.string(v, &f)?, line(v))),
                    "rate_limit" => rule_node = Some((v, f)),
                    "shadow_mode" => shadow_mode = self.boolean(v, &f)?,
                    "descriptors" => nested = Some((v, f)),
                    "detailed_metric" | "value_to_metric" | "share_threshold" | "quota_mode" | "metadata" => {
                        return Err(self.err(
                            line(v),
                            &f,
                            "envoyproxy/ratelimit's option is not supported by ratomic serve: remove it",
                        ))
                    }
                    _ => {
                        return Err(self.err(
                            line(v),
                            &f,
                            "unknown key: a descriptor has key, value, rate_limit, shadow_mode and descriptors",
                        ))
                    }
                }
            }
            let Some((key, key_line)) = key else {
                return Err(self.err(line(item), &format!("{here}.key"), "missing: every descriptor needs a key"));
            };
            if key.is_empty() {
                return Err(self.err(key_line, &format!("{here}.key"), "empty: every descriptor needs a key"));
            }
            let value = match value {
                Some((v, _)) if v.is_empty() => None,
                Some((v, l)) if v.contains('*') => {
                    return Err(self.err(
                        l,
                        &format!("{here}.value"),
                        format!("{v:?}: wildcard values are not supported by ratomic serve; list the values, or leave `value` out to match any"),
                    ))
                }
                Some((v, _)) => Some(v),
                None => None,
            };
            let path = match &value {
                Some(v) => format!("{parent_path}.{key}_{v}"),
                None => format!("{parent_path}.{key}"),
            };
            let map_key = (key, value);
            if parent.children.contains_key(&map_key) {
                return Err(self.err(
                    line(item),
                    &here,
                    format!("duplicate descriptor {path:?}: the same key and value appear twice at this level"),
                ));
            }
            let mut node = Node::default();
            if let Some((r, f)) = rule_node {
                let mut rule = self.rule(r, &f, path.clone())?;
                rule.shadow_mode = shadow_mode;
                node.rule = Some(rule);
            }
            if let Some((n, f)) = nested {
                self.descriptors(n, &f, &path, &mut node, depth + 1)?;
            }
            parent.children.insert(map_key, node);
        }
        Ok(())
    }

    fn rule(&self, node: &MarkedYamlOwned, field: &str, path: String) -> Result<Rule, ConfigError> {
        let mut unit = None;
        let mut rpu = None;
        let mut unlimited = false;
        let mut name = String::new();
        let mut replaces = Vec::new();
        for (k, v) in self.mapping(node, field)? {
            let f = format!("{field}.{k}");
            match k.as_str() {
                "unit" => {
                    let s = self.string(v, &f)?;
                    let u = Unit::parse(&s).ok_or_else(|| {
                        self.err(
                            line(v),
                            &f,
                            format!(
                                "invalid rate limit unit {s:?}: use second, minute, hour, day, week, month or year"
                            ),
                        )
                    })?;
                    unit = Some(u);
                }
                "requests_per_unit" => match &v.data {
                    YamlDataOwned::Value(ScalarOwned::Integer(n)) if (0..=i64::from(u32::MAX)).contains(n) => {
                        rpu = Some(*n as u32);
                    }
                    _ => {
                        return Err(self.err(
                            line(v),
                            &f,
                            format!("expected a whole number from 0 to {} (requests per unit)", u32::MAX),
                        ))
                    }
                },
                "unlimited" => unlimited = self.boolean(v, &f)?,
                "name" => name = self.string(v, &f)?,
                "replaces" => {
                    let YamlDataOwned::Sequence(items) = &v.data else {
                        return Err(self.err(line(v), &f, "expected a list of `- name: <rate_limit name>`"));
                    };
                    for (i, item) in items.iter().enumerate() {
                        let fi = format!("{f}[{i}]");
                        let mut n = None;
                        for (k2, v2) in self.mapping(item, &fi)? {
                            if k2 != "name" {
                                return Err(self.err(
                                    line(v2),
                                    &format!("{fi}.{k2}"),
                                    "unknown key: a replaces entry has only `name`",
                                ));
                            }
                            n = Some((self.string(v2, &format!("{fi}.name"))?, line(v2)));
                        }
                        match n {
                            Some((s, _)) if !s.is_empty() => replaces.push(s),
                            Some((_, l)) => {
                                return Err(self.err(
                                    l,
                                    &format!("{fi}.name"),
                                    "empty: name the rate_limit this one replaces",
                                ))
                            }
                            None => {
                                return Err(self.err(
                                    line(item),
                                    &format!("{fi}.name"),
                                    "missing: name the rate_limit this one replaces",
                                ))
                            }
                        }
                    }
                }
                _ => {
                    return Err(self.err(
                        line(v),
                        &f,
                        "unknown key: a rate_limit has unit, requests_per_unit, unlimited, name and replaces",
                    ))
                }
            }
        }
        if !name.is_empty() && replaces.contains(&name) {
            return Err(self.err(
                line(node),
                &format!("{field}.replaces"),
                format!("a rate_limit cannot replace itself ({name:?})"),
            ));
        }
        let limit = if unlimited {
            if unit.is_some() || rpu.is_some() {
                return Err(self.err(
                    line(node),
                    field,
                    "unlimited: true takes no unit or requests_per_unit: remove them, or remove unlimited",
                ));
            }
            Limit::Unlimited
        } else {
            let Some(unit) = unit else {
                return Err(self.err(
                    line(node),
                    &format!("{field}.unit"),
                    "missing: second, minute, hour, day, week, month or year",
                ));
            };
            let Some(requests_per_unit) = rpu else {
                return Err(self.err(
                    line(node),
                    &format!("{field}.requests_per_unit"),
                    "missing: how many requests per unit",
                ));
            };
            Limit::Rate { requests_per_unit, unit }
        };
        let origin = format!("{}:{}: {field}", self.file.display(), line(node));
        Ok(Rule { limit, name, replaces, shadow_mode: false, path, origin })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<(String, Node), ConfigError> {
        parse(Path::new("rl.yaml"), text)
    }

    fn config(text: &str) -> Config {
        let (d, n) = parse_str(text).unwrap();
        Config { domains: HashMap::from([(d, n)]) }
    }

    const MESSAGING: &str = "\
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
  - key: ldap
    rate_limit:
      unlimited: true
";

    fn rpu(m: Match<'_>) -> Option<u32> {
        match m {
            Match::Rule(Rule { limit: Limit::Rate { requests_per_unit, .. }, .. }) => Some(*requests_per_unit),
            Match::Rule(_) => Some(u32::MAX),
            Match::None => None,
        }
    }

    #[test]
    fn nested_descriptors_match_at_their_depth_only() {
        let c = config(MESSAGING);
        assert_eq!(rpu(c.lookup("messaging", [("message_type", "marketing"), ("to_number", "1")])), Some(5));
        assert_eq!(rpu(c.lookup("messaging", [("to_number", "1")])), Some(100));
        // The placeholder level has no rule of its own.
        assert_eq!(rpu(c.lookup("messaging", [("message_type", "marketing")])), None);
        // Deeper than the configuration: no rule.
        assert_eq!(rpu(c.lookup("messaging", [("to_number", "1"), ("x", "y")])), None);
        assert_eq!(rpu(c.lookup("other", [("to_number", "1")])), None);
        assert_eq!(rpu(c.lookup("messaging", [("ldap", "x")])), Some(u32::MAX));
    }

    #[test]
    fn key_and_value_match_before_key_alone() {
        let c = config(
            "domain: d\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 10}\n  - key: ip\n    value: 50.0.0.5\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
        );
        assert_eq!(rpu(c.lookup("d", [("ip", "50.0.0.5")])), Some(0));
        assert_eq!(rpu(c.lookup("d", [("ip", "50.0.0.1")])), Some(10));
    }

    #[test]
    fn errors_name_the_file_the_line_and_the_field() {
        let e = parse_str(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 5);
        assert_eq!(e.field, "descriptors[0].rate_limit.unit");
        assert!(
            e.to_string()
                .starts_with("rl.yaml:5: descriptors[0].rate_limit.unit: invalid rate limit unit \"fortnight\""),
            "{e}"
        );

        let e = parse_str("domain: d\ndescriptors:\n  - key: a\n  - value: b\n").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (4, "descriptors[1].key"));

        let e = parse_str(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: -1\n      unit: second\n",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (5, "descriptors[0].rate_limit.requests_per_unit"));

        let e = parse_str("domain: d\ndescriptors:\n  - key: a\n    shadow: true\n").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (4, "descriptors[0].shadow"));

        let e = parse_str("domain: d\ndescriptors:\n  - key: a\n  - key: a\n").unwrap_err();
        assert_eq!(e.field, "descriptors[1]");
        assert!(e.message.contains("duplicate"), "{e}");

        let e = parse_str(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: second\n",
        )
        .unwrap_err();
        assert!(e.message.contains("unlimited"), "{e}");

        let e = parse_str("domain: d\ndescriptors: [\n").unwrap_err();
        assert!(e.message.starts_with("not valid YAML"), "{e}");
        assert!(e.line >= 2, "{e:?}");

        let e = parse_str("descriptors: []\n").unwrap_err();
        assert_eq!(e.field, "domain");

        let e = parse_str("domain: d\ndescriptors:\n  - key: a\n    value: v*\n").unwrap_err();
        assert!(e.message.contains("wildcard"), "{e}");

        let e = parse_str(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: x\n      replaces:\n        - name: x\n      unit: second\n      requests_per_unit: 1\n",
        )
        .unwrap_err();
        assert!(e.message.contains("replace itself"), "{e}");
    }

    #[test]
    fn replaces_shadow_mode_and_names_are_read() {
        let c = config(
            "domain: d\ndescriptors:\n  - key: u\n    shadow_mode: true\n    rate_limit:\n      name: n1\n      replaces:\n        - name: n0\n      unit: minute\n      requests_per_unit: 3\n",
        );
        let Match::Rule(r) = c.lookup("d", [("u", "x")]) else { panic!("no rule") };
        assert!(r.shadow_mode);
        assert_eq!(r.name, "n1");
        assert_eq!(r.replaces, vec!["n0".to_string()]);
        assert_eq!(r.path, "d.u");
        assert_eq!(r.limit, Limit::Rate { requests_per_unit: 3, unit: Unit::Minute });
    }
}
