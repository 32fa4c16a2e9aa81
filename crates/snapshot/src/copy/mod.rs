//! The copy store: any filesystem; a snapshot is one archive of the upper,
//! walked by descriptor, and a fork restores it by descriptor.
//!
//! | file | what it is for |
//! |---|---|
//! | `store` | the store: layout, partial names, the trait |
//! | `entry` | one archived name and its metadata |
//! | `pax` | the archive format, encoded and decoded (pure) |
//! | `dirs` | directories held by descriptor, bounded whatever the depth |
//! | `walk` | snapshot: an upper into an archive |
//! | `restore` | fork: an archive into a new upper |
//! | `remove` | removing an upper area, by descriptor too |

mod dirs;
mod entry;
mod pax;
mod remove;
mod restore;
mod store;
mod walk;

pub use store::{COPY_STORE_VERSION, CopyStore};
