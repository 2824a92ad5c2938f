//! Prints the statements of the common call as pgbench scripts take them,
//! for `postgres/bench-shapes.sh`: `allow` (the upsert, [`schema::ALLOW`])
//! and `call` (the same call through the PL/pgSQL function,
//! [`schema::CALL`]), their parameters as pgbench variables
//! (`:prefix :key :inc :tau :t :burst`, and `:zero` = 0 for the time:
//! `nullif(:zero, 0)`, a NULL the planner cannot fold, as the client's
//! `$3` is: the server's time).
//!
//!     cargo run -q -p ratomic-postgres --example pg_shapes -- allow|call

use ratomic_postgres::schema;

fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    let sql = match which.as_str() {
        "allow" => [":prefix", ":key", "nullif(:zero::bigint, 0)", ":inc", ":tau"]
            .iter()
            .enumerate()
            .fold(schema::ALLOW.to_owned(), |sql, (i, v)| sql.replace(&format!("${}", i + 1), v)),
        "call" => "SELECT ratomic_v1_call('a', :prefix, :key::bytea, NULL, 1, 'g', ARRAY[:t::bigint], \
                   ARRAY[:burst::bigint])"
            .to_owned(),
        _ => {
            eprintln!("usage: pg_shapes allow|call");
            std::process::exit(2);
        }
    };
    println!("{sql};");
}
