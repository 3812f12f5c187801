//! Time zones, always resolved through the bundled tz database (TC-2.1, TC-2.2), so a
//! reading never depends on the machine's `/usr/share/zoneinfo`.

use std::sync::OnceLock;

use jiff::tz::{TimeZone, TimeZoneDatabase};

/// The bundled IANA database, loaded once.
pub(crate) fn bundled() -> &'static TimeZoneDatabase {
    static DATABASE: OnceLock<TimeZoneDatabase> = OnceLock::new();
    DATABASE.get_or_init(TimeZoneDatabase::bundled)
}

/// An IANA time zone: its identifier (as the bundled database spells it) and rules.
#[derive(Debug, Clone)]
pub struct Zone {
    name: String,
    time_zone: TimeZone,
}

impl PartialEq for Zone {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Zone {}

impl Zone {
    /// The zone named `name` (an IANA identifier such as `Asia/Shanghai`, or `UTC`),
    /// looked up case-insensitively in the bundled database. The error names the value.
    pub fn named(name: &str) -> Result<Self, String> {
        let invalid =
            || format!("time_zone must be a valid IANA time zone identifier, got {name:?}");
        if name.is_empty() {
            return Err(invalid());
        }
        let time_zone = bundled().get(name).map_err(|_| invalid())?;
        let name = time_zone.iana_name().unwrap_or(name).to_owned();
        Ok(Self { name, time_zone })
    }

    /// The process zone (TC-2.1): `TZ` when set, else the system zone.
    pub fn process() -> Result<Self, String> {
        let tz = std::env::var_os("TZ").map(|value| value.to_string_lossy().into_owned());
        Self::from_tz_env(tz.as_deref())
    }

    /// The process zone for a given value of the `TZ` variable (`None`: unset):
    ///
    /// - empty means `UTC` (the common Unix convention);
    /// - `Name`, `:Name` and paths ending in `zoneinfo/Name` name a zone of the bundled
    ///   database;
    /// - anything else (a POSIX rule string such as `EST5EDT,M3.2.0,M11.1.0`, a file
    ///   outside a zoneinfo tree) has no IANA name to show and is an error;
    /// - unset: the system zone (`/etc/localtime` on Unix), whose IANA name must be
    ///   known to the bundled database.
    pub fn from_tz_env(tz: Option<&str>) -> Result<Self, String> {
        match tz {
            Some("") => Self::named("UTC"),
            Some(value) => {
                let trimmed = value.strip_prefix(':').unwrap_or(value);
                let name = match trimmed.rfind("zoneinfo/") {
                    Some(at) => &trimmed[at + "zoneinfo/".len()..],
                    None => trimmed,
                };
                Self::named(name).map_err(|_| {
                    format!(
                        "time_zone is omitted and TZ={value:?} is not an IANA time zone identifier; set time_zone"
                    )
                })
            }
            None => {
                let system = TimeZone::try_system().map_err(|error| {
                    format!("time_zone is omitted and the system time zone cannot be resolved ({error}); set time_zone")
                })?;
                let name = system.iana_name().ok_or(
                    "time_zone is omitted and the system time zone has no IANA identifier; set time_zone",
                )?;
                Self::named(name).map_err(|_| {
                    format!("time_zone is omitted and the system time zone {name:?} is not in the bundled database; set time_zone")
                })
            }
        }
    }

    /// The IANA identifier, as the reading shows it in brackets.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The zone's rules.
    pub(crate) fn time_zone(&self) -> &TimeZone {
        &self.time_zone
    }
}
