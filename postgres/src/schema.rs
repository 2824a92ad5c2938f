//! The SQL a limiter needs: one table and six functions, version 1
//! (`ratomic_v1_state`, `ratomic_v1_call`, its common case
//! `ratomic_v1_allow`, `ratomic_v1_many`, `ratomic_v1_gc`, and for leased
//! tokens `ratomic_v1_lease` and `ratomic_v1_give_back`).
//!
//! The crate's client runs [`sql`] when it connects (unless
//! [`Options::migrate`](crate::Options::migrate) is off), in one
//! transaction under an advisory lock so that processes starting together
//! do not race. A DBA who would rather run it by hand prints it:
//!
//! ```
//! let sql = ratomic_postgres::schema::sql(false);
//! assert!(sql.contains("CREATE TABLE IF NOT EXISTS ratomic_v1_state"));
//! assert!(ratomic_postgres::schema::sql(true).contains("CREATE UNLOGGED TABLE"));
//! ```
//!
//! Running it again is harmless (`IF NOT EXISTS`, `CREATE OR REPLACE`);
//! a DBA who runs it by hand runs it again after upgrading the library (a
//! newer library may call a function an older script did not create).
//!
//! **`UNLOGGED`** (`sql(true)`): the table skips the write-ahead log, so
//! every decision that writes is cheaper; the price is that a crash of
//! the server (not a clean restart) empties the table — every key is full
//! again, so after a crash the fleet may grant up to one more burst per
//! key — and that replicas do not have it. Choosing it on an existing
//! table is `ALTER TABLE ratomic_v1_state SET UNLOGGED`.

/// The schema's source, with the table logged.
pub const SOURCE: &str = include_str!("../sql/ratomic.sql");

/// The key of the advisory lock the migration holds.
pub const MIGRATION_LOCK: i64 = 0x7261_746f_6d69_6331; // "ratomic1"

/// The SQL that creates the table (unlogged if `unlogged`) and the
/// functions.
pub fn sql(unlogged: bool) -> String {
    if unlogged {
        SOURCE.replace("CREATE /*UNLOGGED*/ TABLE", "CREATE UNLOGGED TABLE")
    } else {
        SOURCE.replace("CREATE /*UNLOGGED*/ TABLE", "CREATE TABLE")
    }
}

/// The migration as the client runs it: [`sql`] in one transaction, under
/// an advisory lock.
pub fn migration(unlogged: bool) -> String {
    format!("BEGIN;\nSELECT pg_advisory_xact_lock({MIGRATION_LOCK});\n{}\nCOMMIT;\n", sql(unlogged))
}

/// The statement of one call: `$1` op, `$2` prefix, `$3` key (bytea), `$4`
/// time in µs or NULL, `$5` amount, `$6` kinds, `$7`/`$8` the rules'
/// parameters (bigint[]). Its one row's one column is a bigint[].
pub const CALL: &str = "SELECT ratomic_v1_call($1, $2, $3, $4, $5, $6, $7, $8)";

/// The statement of the common call, an allow on one token bucket that
/// asks for no lease ([`Statement::Allow`](crate::Statement::Allow)): `$1`
/// prefix, `$2` key, `$3` time in µs or NULL, `$4` amount, `$5` the
/// emission interval in µs and `$6` the burst (the rule's `p1()[0]` and
/// `p2()[0]`). Its one column is a bigint[], as [`CALL`]'s.
pub const ALLOW: &str = "SELECT ratomic_v1_allow($1, $2, $3, $4, $5, $6)";

/// The statement of a call that also leases tokens (see
/// [`Lease`](crate::Lease)): `$1` prefix, `$2` key, `$3` time in µs or
/// NULL, `$4` cost, `$5` the most tokens to lease beyond it, `$6` kinds
/// (all `g`), `$7`/`$8` the rules' parameters. Its one column is a
/// bigint[]: the call's reply, then the tokens leased, the server's time
/// and each limit's lease end.
pub const LEASE: &str = "SELECT ratomic_v1_lease($1, $2, $3, $4, $5, $6, $7, $8)";

/// The statement of a give-back of a lease's unused tokens: `$1` prefix,
/// `$2` key, `$3` time in µs or NULL, `$4` kinds, `$5` each limit's lease
/// end and `$6` first unused slot (bigint[]). Its one column is a
/// bigint[]: `[limits given back]`.
pub const GIVE_BACK: &str = "SELECT ratomic_v1_give_back($1, $2, $3, $4, $5, $6)";

/// The statement of a batch: as [`CALL`] with `$3` the keys (bytea[]) and
/// `$4` the amounts (bigint[]), `$5` the time.
pub const MANY: &str = "SELECT ratomic_v1_many($1, $2, $3, $4, $5, $6, $7, $8)";

/// The statement of a garbage collection: `$1` the prefix (NULL: every
/// prefix), `$2` time in µs or NULL, `$3` the most rows to remove (int4).
/// Its one row's one column is how many it removed.
pub const GC: &str = "SELECT ratomic_v1_gc($1, $2, $3)";
