//! Which attribute is expanded. `#[distributed_lock]`, `#[semaphore]`, `#[read_lock]`,
//! `#[upgradeable_read_lock]`, `#[write_lock]` and `#[single_flight]` share the options, the key template, the checks of
//! the signature and the code they generate; the attribute decides the name its messages
//! give it, which options apply and what the lease is of.

use proc_macro2::TokenStream;
use quote::quote;

/// One of the crate's locking attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attribute {
    /// `#[distributed_lock]`: an exclusive lock.
    DistributedLock,
    /// `#[semaphore]`: one of `permits` permits.
    Semaphore,
    /// `#[read_lock]`: a reader's share of a read-write lock.
    ReadLock,
    /// `#[upgradeable_read_lock]`: the upgradeable reader of a read-write lock.
    UpgradeableReadLock,
    /// `#[write_lock]`: a read-write lock's writer.
    WriteLock,
    /// `#[single_flight]`: once-only work, its result shared.
    SingleFlight,
}

impl Attribute {
    /// As the user wrote it, for messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::DistributedLock => "#[distributed_lock]",
            Self::Semaphore => "#[semaphore]",
            Self::ReadLock => "#[read_lock]",
            Self::UpgradeableReadLock => "#[upgradeable_read_lock]",
            Self::WriteLock => "#[write_lock]",
            Self::SingleFlight => "#[single_flight]",
        }
    }

    /// Whether it reads a read-write lock (its lease carries no fencing token).
    pub(crate) fn reads(self) -> bool {
        matches!(self, Self::ReadLock | Self::UpgradeableReadLock)
    }

    /// What its key names, for messages.
    pub(crate) fn named(self) -> &'static str {
        match self {
            Self::DistributedLock => "the lock",
            Self::Semaphore => "the semaphore",
            Self::ReadLock | Self::UpgradeableReadLock | Self::WriteLock => "the read-write lock",
            Self::SingleFlight => "the work",
        }
    }

    /// What a call holds while its body runs, for messages.
    pub(crate) fn held(self) -> &'static str {
        match self {
            Self::DistributedLock => "the lock",
            Self::Semaphore => "a permit",
            Self::ReadLock => "the read lock",
            Self::UpgradeableReadLock => "the upgradeable read lock",
            Self::WriteLock => "the write lock",
            Self::SingleFlight => "the work's turn",
        }
    }

    /// An example of it with a key, for messages.
    pub(crate) fn example(self) -> &'static str {
        match self {
            Self::DistributedLock => "#[distributed_lock(key = \"order:<user_id>\")]",
            Self::Semaphore => "#[semaphore(key = \"export:<tenant>\", permits = 5)]",
            Self::ReadLock => "#[read_lock(key = \"config:<id>\")]",
            Self::UpgradeableReadLock => "#[upgradeable_read_lock(key = \"config:<id>\")]",
            Self::WriteLock => "#[write_lock(key = \"config:<id>\")]",
            Self::SingleFlight => "#[single_flight(key = \"report:<id>\", ttl = \"30s\")]",
        }
    }

    /// What the generated code asks the runtime to take: `private::Taking::…`.
    pub(crate) fn taking(
        self,
        private: &TokenStream,
        permits: Option<u32>,
        take: Option<u32>,
    ) -> TokenStream {
        match (self, permits) {
            (Self::Semaphore, Some(permits)) => {
                let take = take.unwrap_or(1);
                quote!(#private::Taking::Permit(#permits, #take))
            }
            (Self::ReadLock, _) => quote!(#private::Taking::Read),
            (Self::UpgradeableReadLock, _) => quote!(#private::Taking::UpgradeableRead),
            (Self::WriteLock, _) => quote!(#private::Taking::Write),
            _ => quote!(#private::Taking::Lock),
        }
    }
}
