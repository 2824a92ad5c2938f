//! The SQL a limiter needs: one table and five functions, version 1
//! (`ratomic_v1_state`, `ratomic_v1_call`, `ratomic_v1_many`,
//! `ratomic_v1_gc`, and for leased tokens `ratomic_v1_lease` and
//! `ratomic_v1_give_back`), and the common call's statement, [`ALLOW`].
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
//! **Across a server crash.** A decision the server answered was committed
//! before its reply, so with the table logged (the default) and commits
//! durable (`synchronous_commit` on, PostgreSQL's default) a crash and
//! restart loses none: every bucket and lease fence comes back as it was
//! answered for, the leases processes still hold keep granting, and the
//! bound — burst + rate × elapsed per key in every interval, over every
//! process — holds across it, exactly (tested: the server crashed with
//! `pg_ctl stop -m immediate` mid-run under four leasing processes).
//!
//! **`UNLOGGED`** (`sql(true)`): the table skips the write-ahead log, so
//! every decision that writes is cheaper; the price is that a crash of
//! the server (not a clean restart) empties the table, and that replicas do
//! not have it. After a crash every key is full again while the slots
//! granted before it — leases still held among them — are still being
//! spent, so the fleet may grant **one more burst per key per crash**: at
//! most 2 × burst + rate × elapsed in any interval (what it grants before
//! the crash and what it grants after each conform on their own; tested:
//! the exact bound fails and this one holds). The library does not detect
//! the reset. The same bound, and the same loss, hold for a logged table
//! whose commits are not durable — `synchronous_commit = off` (a crash
//! loses the commits of up to three `wal_writer_delay`s; seen
//! over-granting when the same test's server ran with it) — or whose
//! server fails over to an asynchronous replica (what it had not received
//! is lost): for exactness across a crash, keep the table logged and its
//! commits durable. The statements that take tokens see to the latter in
//! every face: where the server's default is `off`, they raise it to
//! `local` for their own transaction (as `SET LOCAL`; inside a caller's
//! transaction, for that transaction) and leave any other setting alone
//! (tested: the crash test on a server running `off` stays exact). On an
//! UNLOGGED table it changes nothing: PostgreSQL commits a transaction
//! that wrote no WAL without a flush, whatever the setting. Choosing
//! `UNLOGGED` on an existing table is `ALTER TABLE ratomic_v1_state SET
//! UNLOGGED`.

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

/// The server's time in whole µs unless `$3` gives the caller's:
/// `statement_timestamp()`, the time the statement started, the same
/// wherever the statement reads it (`clock_timestamp()` is read anew each
/// time: a check and a write could disagree), and this statement's own
/// even inside a transaction (`now()` is the transaction's start).
macro_rules! allow_now {
    () => {
        "coalesce($3::bigint, (extract(epoch FROM statement_timestamp()) * 1000000)::bigint)"
    };
}

/// The bucket's TAT as the row holds it, for a row written under other
/// kinds of rules: none (a full key).
macro_rules! allow_tat {
    () => {
        "CASE WHEN s.kinds = 'g' THEN s.state[1] ELSE 0 END"
    };
}

/// The statement of the common call, an allow on one token bucket that
/// asks for no lease ([`Statement::Allow`](crate::Statement::Allow)): the
/// upsert at the heart of [`CALL`], sent as it is, with `$1` prefix, `$2`
/// key, `$3` time in µs or NULL, `$4` the increment (cost × the emission
/// interval T, µs) and `$5` τ (capacity × T, µs): the parameters
/// [`Limits::one_bucket`](crate::Limits::one_bucket) and
/// [`Call::increment`](crate::Call::increment) give. A call it grants is
/// one row of one `bigint`, the bucket's reset after the call in µs, from
/// which every field follows ([`Limits::decode_allow`](crate::Limits::decode_allow));
/// a call it does not grant — a denial, a cost of 0 — writes nothing and
/// returns **no row**: send [`Call::general`](crate::Call::general)'s
/// statement ([`CALL`]) and finish the call with that reply (it decides at
/// its own reading of the clock). Denials are the rarer call (the deny
/// cache answers their repeats).
///
/// Its shape is the server's cost of a decision (pgbench, one connection,
/// each shape ÷ a hand-written GCRA upsert in the same run, see
/// BENCHMARKS.md): the clock is read once for the row and once for the
/// reply (the update finds it as `excluded.full_at − $4`: each
/// `extract(epoch …)` is numeric arithmetic), the products are the
/// client's, and the reply is one integer rather than an array built on
/// the server.
pub const ALLOW: &str = concat!(
    "WITH t AS (SELECT ",
    allow_now!(),
    " AS now) ",
    "INSERT INTO ratomic_v1_state AS s (prefix, key, kinds, state, full_at) ",
    "SELECT $1::text, $2::bytea, 'g', ARRAY[t.now + $4::bigint, 0, 0], t.now + $4::bigint FROM t ",
    "WHERE $4::bigint >= 1 AND $4::bigint <= $5::bigint ",
    // Durable commits (see the schema's source): off is raised to local for
    // this statement's transaction; any other setting is left as it is.
    "AND (current_setting('synchronous_commit') <> 'off' ",
    "OR set_config('synchronous_commit', 'local', true) IS NOT NULL) ",
    // excluded.full_at is now + $4: the time the row would have had.
    "ON CONFLICT (prefix, key) DO UPDATE SET kinds = 'g', ",
    "state = ARRAY[greatest(",
    allow_tat!(),
    ", excluded.full_at - $4::bigint) + $4::bigint, CASE WHEN s.kinds = 'g' THEN s.state[2] ELSE 0 END, 0], ",
    "full_at = greatest(",
    allow_tat!(),
    ", excluded.full_at - $4::bigint) + $4::bigint ",
    "WHERE greatest(",
    allow_tat!(),
    ", excluded.full_at - $4::bigint) + $4::bigint - (excluded.full_at - $4::bigint) <= $5::bigint ",
    // full_at is the new TAT (the only limit's).
    "RETURNING s.full_at - ",
    allow_now!()
);

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
