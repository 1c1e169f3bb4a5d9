use rlock_runtime::{LockError, read_lock, write_lock};

#[write_lock(key = "config:<id>", permits = 2)]
async fn write(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[read_lock(keys = ["a:<id>", "b:<id>"])]
async fn read(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[read_lock(key = "config:<idd>", wiat = "1s")]
async fn typos(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[write_lock(ttl = "10s")]
async fn no_key(id: u64) -> Result<u64, LockError> {
    Ok(id)
}


#[write_lock(key = "config:<idd>")]
async fn placeholder_typo(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
