//! Generic functions, where-clauses, `impl Trait` arguments, lifetimes and borrowed params.

#![deny(warnings)]
// A caller's program: it may unwrap what it set up itself.
#![allow(clippy::unwrap_used)]

use std::fmt::Display;

use rlock_runtime::{LockClient, LockError, distributed_lock};

#[distributed_lock(key = "item:<id>", client = client)]
async fn generic<T: Display + Send>(client: &LockClient, id: T) -> Result<String, LockError> {
    Ok(id.to_string())
}

#[distributed_lock(key = "item:<id>:<label>", client = client)]
async fn with_where<T, U>(client: LockClient, id: T, label: U) -> Result<String, LockError>
where
    T: Display,
    U: Display + Clone,
{
    Ok(format!("{id}/{}", label.clone()))
}

#[distributed_lock(key = "shown:<value>", client = client)]
async fn impl_arg(client: &LockClient, value: impl Display) -> Result<String, LockError> {
    Ok(value.to_string())
}

#[distributed_lock(key = "name:<name>", client = client)]
async fn borrowed<'a>(client: &LockClient, name: &'a str) -> Result<&'a str, LockError> {
    Ok(name)
}

#[distributed_lock(key = "name:<name>", client = client)]
async fn elided(client: &LockClient, name: &str) -> Result<usize, LockError> {
    Ok(name.len())
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = LockClient::in_memory();
        assert_eq!(generic(&client, 5u8).await.unwrap(), "5");
        assert_eq!(with_where(client.clone(), 1, "x").await.unwrap(), "1/x");
        assert_eq!(impl_arg(&client, 'c').await.unwrap(), "c");
        assert_eq!(borrowed(&client, "ann").await.unwrap(), "ann");
        assert_eq!(elided(&client, "bob").await.unwrap(), 3);
    });
}
