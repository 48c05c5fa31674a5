//! A queue's items kept on disk: where each item's line is in its file and
//! the few fields grouping reads, so that an epoch of a million items costs
//! tens of bytes per item instead of a parsed JSON map each.
//!
//! A [`StoredItems`] is filled once by the items-file reader
//! ([`crate::harness::items_file::load_items_file`]), which has already
//! checked every line. Each epoch groups it by its heads alone
//! ([`StoredItems::units`]); a queue lane reads and parses a group's items
//! only when it runs that group ([`StoredGroup::load`]), and drops them with
//! its records.
//!
//! The grouping rules are the held items' ones ([`super::units`]); only the
//! item's storage differs.

use std::collections::HashMap;
use std::fs::File;
use std::hash::BuildHasher;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::adapter_error::{AdapterError, ErrorType};
use super::item::Item;
use super::item::{IdentityFields, ItemIdentity};
use super::units::{
    EpisodeGroup, ExecutionUnit, InvalidUnit, ItemFields, ItemHead, QueueHeads, UnitPlan,
    for_each_concurrency_key, plan_units, union_keys,
};

/// Text in [`StoredItems`]' arena: `len` bytes from `start`.
#[derive(Clone, Copy, Debug, Default)]
struct TextRef {
    start: u32,
    len: u32,
}

/// A kept identity field (`family`, a variant's `spec_id`): a string, as
/// its index in [`StoredItems`]' deduplicated names, or one of two
/// markers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Name(u32);

impl Name {
    /// A field whose value is `null` (or, for `family`, absent: records
    /// read both as `null`).
    const NULL: Name = Name(u32::MAX);
    /// A `spec_id` that is not there because the item is no variant or its
    /// `variant_spec` is not an object.
    const ABSENT: Name = Name(u32::MAX - 1);

    /// Whether this names a string rather than being a marker.
    fn is_string(self) -> bool {
        self.0 < Name::ABSENT.0
    }
}

/// One stored item: its line's place in the file, a hash of its bytes (to
/// notice a file changed under the run), its grouping fields and, when
/// they are strings or `null` ([`IDENTITY_FLAG`]), the rest of its
/// records' identity, so that a lane need not parse the line again. 48
/// bytes.
#[derive(Clone, Copy, Debug)]
struct Entry {
    offset: u64,
    len: u32,
    hash: u32,
    item_id: TextRef,
    seed_item_id: TextRef,
    /// `family`, when [`IDENTITY_FLAG`] is set.
    family: Name,
    /// A variant's `variant_spec.spec_id`, when [`IDENTITY_FLAG`] is set.
    spec_id: Name,
    keys_start: u32,
    /// The number of concurrency keys, [`VARIANT_FLAG`] when `is_variant`
    /// is truthy and [`IDENTITY_FLAG`] when the identity is kept.
    keys_len_and_flag: u32,
}

/// How an item read back is held.
#[derive(Clone, Copy, Debug)]
enum Held {
    /// Its line's text, the rest parsed when read (a lane's group: the
    /// component receives the text).
    Text,
    /// Its map (a held queue reads every item's fields anyway).
    Map,
}

/// The bit of [`Entry::keys_len_and_flag`] that marks a variant.
const VARIANT_FLAG: u32 = 1 << 31;
/// The bit of [`Entry::keys_len_and_flag`] that marks a kept identity:
/// `item_id` is the stored (untrimmed-equal) string, and `family` and
/// `spec_id` are held in the entry.
const IDENTITY_FLAG: u32 = 1 << 30;

impl Entry {
    fn is_variant(&self) -> bool {
        self.keys_len_and_flag & VARIANT_FLAG != 0
    }

    fn has_identity(&self) -> bool {
        self.keys_len_and_flag & IDENTITY_FLAG != 0
    }

    fn keys_len(&self) -> u32 {
        self.keys_len_and_flag & !(VARIANT_FLAG | IDENTITY_FLAG)
    }
}

/// Why an item could not be added to a [`StoredItems`].
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The ids and keys of the file's items outgrow the 4 GiB the store
    /// addresses, or a line is longer than 4 GiB.
    #[error("the items file is too large to hold compactly ({what} over 4 GiB)")]
    TooLarge {
        /// What overflowed.
        what: &'static str,
    },
}

/// The items of one items file, kept as positions in it plus their grouping
/// fields (`item_id`, `seed_item_id`, `is_variant`, their
/// [`item_concurrency_keys`](super::units::item_concurrency_keys)) and the
/// rest of their records' identity (`family`, a variant's `spec_id`).
/// About 56 bytes per item (its entry and one key reference) plus its ids'
/// text; a family or spec id is kept once for the items that repeat it
/// while the store is filled (a file read in parts joins the parts' names
/// as they are).
///
/// The file stays open; items are read back with positioned reads, so no
/// cursor is shared between the lanes that read it.
#[derive(Debug)]
pub struct StoredItems {
    path: PathBuf,
    file: File,
    entries: Vec<Entry>,
    text: String,
    keys: Vec<TextRef>,
    /// The distinct `family` and `spec_id` strings of kept identities.
    names: Vec<TextRef>,
    /// While filling: [`StoredItems::names`] by the hash of their text
    /// (the first name of each hash).
    name_index: HashMap<u64, Name, foldhash::fast::FixedState>,
    name_hasher: foldhash::fast::FixedState,
}

/// The hash of a stored line (fixed seed: the same bytes always hash
/// alike), folded to 32 bits.
fn line_hash(bytes: &[u8]) -> u32 {
    let hash = foldhash::fast::FixedState::with_seed(0x5a4d_1005).hash_one(bytes);
    (hash ^ (hash >> 32)) as u32
}

impl StoredItems {
    /// An empty store of the items in `file`, read from `path` (named in
    /// errors).
    pub fn new(path: impl Into<PathBuf>, file: File) -> Self {
        Self {
            path: path.into(),
            file,
            entries: Vec::new(),
            text: String::new(),
            keys: Vec::new(),
            names: Vec::new(),
            name_index: HashMap::default(),
            name_hasher: foldhash::fast::FixedState::with_seed(0x4e41_4d45),
        }
    }

    /// Adds the item whose JSON text is `bytes`, at byte `offset` of the
    /// file. `fields` holds (at least) the item's
    /// grouping fields — `item_id`, `is_variant`, `seed_item_id`,
    /// `concurrency_keys`, `concurrency_key`, `family` — as parsed from
    /// that text; nothing else is read from it. `identity` is the item's
    /// records' identity as read from the same text (`None` when the text
    /// names one of its fields twice): kept when its fields are strings or
    /// `null` (the usual case), so the item is not parsed again when it
    /// runs.
    ///
    /// # Errors
    /// [`StoreError::TooLarge`] when the store's text, keys or names pass
    /// what it addresses (4 GiB of text, 2^30 keys per item, 2^32 - 2
    /// names), or a line is longer than 4 GiB.
    pub(crate) fn push<F: ItemFields + ?Sized>(
        &mut self,
        offset: u64,
        bytes: &[u8],
        fields: &F,
        identity: Option<&IdentityFields<'_>>,
    ) -> Result<(), StoreError> {
        let head = ItemHead::of(fields);
        let len =
            u32::try_from(bytes.len()).map_err(|_| StoreError::TooLarge { what: "a line" })?;
        let item_id = self.intern(&head.item_id)?;
        let seed_item_id = if head.is_variant {
            self.intern(&head.seed_item_id)?
        } else {
            TextRef::default()
        };
        let keys_start = self.keys.len();
        let mut interned = Ok(());
        for_each_concurrency_key(fields, |key| {
            if interned.is_ok() {
                interned = self.intern(key).map(|key| self.keys.push(key));
            }
        });
        interned?;
        let too_many = || StoreError::TooLarge { what: "the keys" };
        let keys_start = u32::try_from(keys_start).map_err(|_| too_many())?;
        let keys_len = u32::try_from(self.keys.len()).map_err(|_| too_many())? - keys_start;
        if keys_len >= IDENTITY_FLAG {
            return Err(too_many());
        }
        let kept = match identity {
            Some(identity) => self.keep_identity(identity, &head)?,
            None => None,
        };
        let (family, spec_id) = kept.unwrap_or((Name::NULL, Name::ABSENT));
        self.entries.push(Entry {
            offset,
            len,
            hash: line_hash(bytes),
            item_id,
            seed_item_id,
            family,
            spec_id,
            keys_start,
            keys_len_and_flag: keys_len
                | if head.is_variant { VARIANT_FLAG } else { 0 }
                | if kept.is_some() { IDENTITY_FLAG } else { 0 },
        });
        Ok(())
    }

    /// `family` and `spec_id` of `identity` as entry fields, when the whole
    /// identity can be kept: `item_id` a string the head holds as it is
    /// (not trimmed), `family` and `spec_id` strings or `null`.
    fn keep_identity(
        &mut self,
        identity: &IdentityFields<'_>,
        head: &ItemHead<'_>,
    ) -> Result<Option<(Name, Name)>, StoreError> {
        /// How a field is kept.
        enum Kept<'t> {
            /// As a marker.
            Marker(Name),
            /// As a name for this text.
            Text(&'t str),
        }
        /// `Some` when `value` can be kept: `null` (or absent) as
        /// [`Name::NULL`], a string as itself.
        fn keepable(value: Option<&Value>) -> Option<Kept<'_>> {
            match value {
                None | Some(Value::Null) => Some(Kept::Marker(Name::NULL)),
                Some(Value::String(text)) => Some(Kept::Text(text)),
                Some(_) => None,
            }
        }
        if !matches!(identity.item_id, Some(Value::String(id)) if *id == head.item_id) {
            return Ok(None);
        }
        let family = keepable(identity.family);
        let spec_id = match identity.spec_id {
            Some(spec_id) if head.is_variant => keepable(spec_id),
            _ => Some(Kept::Marker(Name::ABSENT)),
        };
        let (Some(family), Some(spec_id)) = (family, spec_id) else {
            return Ok(None);
        };
        let mut name = |kept| match kept {
            Kept::Marker(marker) => Ok(marker),
            Kept::Text(text) => self.name(text),
        };
        let (family, spec_id) = (name(family)?, name(spec_id)?);
        Ok(Some((family, spec_id)))
    }

    /// The [`Name`] of `text`: the last item's family when equal (a seed's
    /// items usually share one), else a name seen before (found by hash),
    /// else a new one.
    fn name(&mut self, text: &str) -> Result<Name, StoreError> {
        let same = |name: Name| name.is_string() && self.name_text(name) == text;
        if let Some(last) = self.entries.last().filter(|last| same(last.family)) {
            return Ok(last.family);
        }
        let hash = self.name_hasher.hash_one(text);
        if let Some(&known) = self.name_index.get(&hash)
            && same(known)
        {
            return Ok(known);
        }
        let too_many = || StoreError::TooLarge { what: "the names" };
        let name = Name(u32::try_from(self.names.len()).map_err(|_| too_many())?);
        if !name.is_string() {
            return Err(too_many());
        }
        let at = self.intern(text)?;
        self.names.push(at);
        self.name_index.entry(hash).or_insert(name);
        Ok(name)
    }

    fn name_text(&self, name: Name) -> &str {
        self.text(self.names[name.0 as usize])
    }

    /// The identity kept for `entry` ([`StoredItems::keep_identity`]), if
    /// any.
    fn kept_identity(&self, entry: &Entry) -> Option<ItemIdentity> {
        if !entry.has_identity() {
            return None;
        }
        let value = |name: Name| {
            if name.is_string() {
                Value::String(self.name_text(name).to_owned())
            } else {
                Value::Null
            }
        };
        Some(ItemIdentity {
            item_id: Value::String(self.text(entry.item_id).to_owned()),
            family: value(entry.family),
            is_variant: entry.is_variant(),
            variant_spec_id: (entry.spec_id != Name::ABSENT).then(|| value(entry.spec_id)),
        })
    }

    /// Appends the items of `other`, a store of a later part of the same
    /// file, after this store's.
    ///
    /// # Errors
    /// [`StoreError::TooLarge`] when the joined store passes 4 GiB of text
    /// or keys.
    pub fn append(&mut self, other: StoredItems) -> Result<(), StoreError> {
        let too_large = |what| StoreError::TooLarge { what };
        let text_shift = u32::try_from(self.text.len()).map_err(|_| too_large("the ids"))?;
        let keys_shift = u32::try_from(self.keys.len()).map_err(|_| too_large("the keys"))?;
        let names_shift = u32::try_from(self.names.len()).map_err(|_| too_large("the names"))?;
        let shift_name = |name: Name| -> Result<Name, StoreError> {
            if !name.is_string() {
                return Ok(name);
            }
            Some(Name(
                name.0
                    .checked_add(names_shift)
                    .ok_or(too_large("the names"))?,
            ))
            .filter(|name| name.is_string())
            .ok_or(too_large("the names"))
        };
        let shift = |at: TextRef| -> Result<TextRef, StoreError> {
            let start = at
                .start
                .checked_add(text_shift)
                .ok_or(too_large("the ids"))?;
            start.checked_add(at.len).ok_or(too_large("the ids"))?;
            Ok(TextRef { start, ..at })
        };
        self.text.reserve_exact(other.text.len());
        self.text.push_str(&other.text);
        self.keys.reserve_exact(other.keys.len());
        for key in other.keys {
            self.keys.push(shift(key)?);
        }
        self.names.reserve_exact(other.names.len());
        for name in other.names {
            self.names.push(shift(name)?);
        }
        self.entries.reserve_exact(other.entries.len());
        for entry in other.entries {
            self.entries.push(Entry {
                item_id: shift(entry.item_id)?,
                seed_item_id: shift(entry.seed_item_id)?,
                family: shift_name(entry.family)?,
                spec_id: shift_name(entry.spec_id)?,
                keys_start: entry
                    .keys_start
                    .checked_add(keys_shift)
                    .ok_or(too_large("the keys"))?,
                ..entry
            });
        }
        Ok(())
    }

    fn intern(&mut self, text: &str) -> Result<TextRef, StoreError> {
        let too_large = || StoreError::TooLarge { what: "the ids" };
        let start = u32::try_from(self.text.len()).map_err(|_| too_large())?;
        let len = u32::try_from(text.len()).map_err(|_| too_large())?;
        start.checked_add(len).ok_or_else(too_large)?;
        self.text.push_str(text);
        Ok(TextRef { start, len })
    }

    fn text(&self, at: TextRef) -> &str {
        &self.text[at.start as usize..(at.start + at.len) as usize]
    }

    /// Makes room for `items` more items (one concurrency key each).
    pub fn reserve(&mut self, items: usize) {
        self.entries.reserve_exact(items);
        self.keys.reserve_exact(items);
    }

    /// Sheds spare capacity worth the copy (over a quarter of what is
    /// used), and the index used while filling, once filling is done.
    pub fn shrink_to_fit(&mut self) {
        self.name_index = HashMap::default();
        fn shrink<T>(vec: &mut Vec<T>) {
            if vec.capacity() - vec.len() > vec.len() / 4 {
                vec.shrink_to_fit();
            }
        }
        shrink(&mut self.entries);
        shrink(&mut self.keys);
        shrink(&mut self.names);
        if self.text.capacity() - self.text.len() > self.text.len() / 4 {
            self.text.shrink_to_fit();
        }
    }

    /// The items file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many items the file holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file holds no items.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The concurrency keys of the item at `index`.
    fn keys_of(&self, index: usize) -> impl Iterator<Item = &str> + '_ {
        let entry = &self.entries[index];
        let start = entry.keys_start as usize;
        let keys = &self.keys[start..start + entry.keys_len() as usize];
        keys.iter().map(|key| self.text(*key))
    }

    /// Reads and parses the item at `index`.
    ///
    /// # Errors
    /// The read's I/O error, or [`io::ErrorKind::InvalidData`] when the
    /// file no longer holds the line it held when it was loaded.
    pub fn read(&self, index: usize) -> io::Result<Item> {
        self.read_as(index, Held::Text)
    }

    fn read_as(&self, index: usize, held: Held) -> io::Result<Item> {
        let entry = &self.entries[index];
        let mut bytes = vec![0; entry.len as usize];
        self.file.read_exact_at(&mut bytes, entry.offset)?;
        self.parse(entry, &bytes, held)
    }

    /// Reads every item, in file order (the held form, for callers that
    /// need the items themselves): each item's map, without its line's
    /// text, since a held queue reads every item's fields anyway.
    ///
    /// # Errors
    /// As [`StoredItems::read`].
    pub fn read_all(&self) -> io::Result<Vec<Item>> {
        let members: Vec<u32> = (0..self.len())
            .map(|index| u32::try_from(index).expect("a store holds fewer than 2^32 items"))
            .collect();
        self.read_members(&members, Held::Map)
    }

    /// Reads the items at `members`: one read for members lying close
    /// together in the file (a seed and its variants usually do), one per
    /// item otherwise.
    fn read_members(&self, members: &[u32], held: Held) -> io::Result<Vec<Item>> {
        let entries = members.iter().map(|&index| &self.entries[index as usize]);
        let (Some(start), Some(end)) = (
            entries.clone().map(|entry| entry.offset).min(),
            entries
                .clone()
                .map(|entry| entry.offset + u64::from(entry.len))
                .max(),
        ) else {
            return Ok(Vec::new());
        };
        let needed: u64 = entries.clone().map(|entry| u64::from(entry.len)).sum();
        let span = end - start;
        if span > needed.saturating_mul(2).saturating_add(4096) {
            return members
                .iter()
                .map(|&index| self.read_as(index as usize, held))
                .collect();
        }
        let span = usize::try_from(span)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "span too large"))?;
        let mut bytes = vec![0; span];
        self.file.read_exact_at(&mut bytes, start)?;
        entries
            .map(|entry| {
                let at = (entry.offset - start) as usize;
                self.parse(entry, &bytes[at..at + entry.len as usize], held)
            })
            .collect()
    }

    fn parse(&self, entry: &Entry, bytes: &[u8], held: Held) -> io::Result<Item> {
        let changed = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: the items file changed while the run was using it (the item at byte {} is no longer the one read there)",
                    self.path.display(),
                    entry.offset
                ),
            )
        };
        if line_hash(bytes) != entry.hash {
            return Err(changed());
        }
        let text = std::str::from_utf8(bytes).map_err(|_| changed())?;
        match held {
            Held::Text => match self.kept_identity(entry) {
                Some(identity) => Ok(Item::from_checked_text(text, identity)),
                None => Item::from_json_text(text),
            },
            Held::Map => serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text)
                .map(Item::from),
        }
        .map_err(|_| changed())
    }

    /// The epoch's units (reference `build_episode_execution_units`), by
    /// the same rules as [`super::units::build_episode_execution_units`]:
    /// groups stay on disk ([`StoredGroup`]) until a lane runs them;
    /// invalid items, which are few, are read now.
    ///
    /// # Errors
    /// [`StoredUnitsError::Invalid`] with the lowest-index reason when
    /// `fatal_preflight` and an item cannot be grouped;
    /// [`StoredUnitsError::Read`] when an invalid item cannot be read back.
    pub fn units(
        self: &Arc<Self>,
        arm: &str,
        epoch: u32,
        fatal_preflight: bool,
    ) -> Result<Vec<StoredUnit>, StoredUnitsError> {
        let plans = match plan_units(&**self, arm, epoch, fatal_preflight) {
            Ok(plans) => plans,
            Err((index, reason)) => {
                let item = self.read(index)?;
                return Err(StoredUnitsError::Invalid(AdapterError::new(
                    ErrorType::InvalidItem,
                    reason.message(&item),
                )));
            }
        };
        plans
            .into_iter()
            .map(|plan| match plan {
                UnitPlan::Invalid { index, reason } => Ok(StoredUnit::Invalid(InvalidUnit::found(
                    self.read(index as usize)?,
                    &reason,
                ))),
                UnitPlan::Group {
                    execution_group_id,
                    seed_item_id,
                    members,
                } => {
                    let concurrency_keys =
                        union_keys(members.iter().map(|&index| self.keys_of(index as usize)));
                    Ok(StoredUnit::Group(StoredGroup {
                        items: Arc::clone(self),
                        execution_group_id,
                        seed_item_id,
                        members,
                        concurrency_keys,
                    }))
                }
            })
            .collect()
    }
}

impl QueueHeads for StoredItems {
    fn len(&self) -> usize {
        self.entries.len()
    }
    fn item_id(&self, index: usize) -> &str {
        self.text(self.entries[index].item_id)
    }
    fn seed_item_id(&self, index: usize) -> &str {
        self.text(self.entries[index].seed_item_id)
    }
    fn is_variant(&self, index: usize) -> bool {
        self.entries[index].is_variant()
    }
}

/// Why a stored queue could not be grouped.
#[derive(Debug, thiserror::Error)]
pub enum StoredUnitsError {
    /// The fatal preflight found an item that cannot be grouped.
    #[error("{0}")]
    Invalid(AdapterError),
    /// An item could not be read back from the file.
    #[error(transparent)]
    Read(#[from] io::Error),
}

/// One unit of a stored queue.
#[derive(Debug)]
pub enum StoredUnit {
    /// A valid seed with its variants, still on disk.
    Group(StoredGroup),
    /// A malformed item, read back (its reason quotes it).
    Invalid(InvalidUnit),
}

/// A seed and its variants as positions in a [`StoredItems`]: an
/// [`EpisodeGroup`] whose items are read when it runs.
#[derive(Debug)]
pub struct StoredGroup {
    items: Arc<StoredItems>,
    /// As [`EpisodeGroup::execution_group_id`].
    pub execution_group_id: String,
    /// As [`EpisodeGroup::seed_item_id`].
    pub seed_item_id: String,
    members: Vec<u32>,
    /// As [`EpisodeGroup::concurrency_keys`].
    pub concurrency_keys: Vec<String>,
}

impl StoredGroup {
    /// Reads the group's items: the [`EpisodeGroup`] a lane runs.
    ///
    /// # Errors
    /// As [`StoredItems::read`].
    pub fn load(&self) -> io::Result<ExecutionUnit> {
        Ok(ExecutionUnit::Group(EpisodeGroup {
            execution_group_id: self.execution_group_id.clone(),
            seed_item_id: self.seed_item_id.clone(),
            items: self.items.read_members(&self.members, Held::Text)?,
            concurrency_keys: self.concurrency_keys.clone(),
        }))
    }

    /// The items file the group is read from.
    pub fn path(&self) -> &Path {
        self.items.path()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use serde_json::{Value, json};

    use super::*;
    use crate::episode::units::build_episode_execution_units;
    use crate::harness::items_file::load_items_file;

    fn file(lines: &[Value]) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        for line in lines {
            writeln!(file, "{line}").unwrap();
        }
        file
    }

    fn held(lines: &[Value]) -> Vec<Item> {
        lines
            .iter()
            .map(|line| Item::from(line.as_object().unwrap().clone()))
            .collect()
    }

    /// Stored units, each read back, as the held units they stand for.
    fn loaded_units(stored: StoredItems, epoch: u32) -> Vec<ExecutionUnit> {
        Arc::new(stored)
            .units("main", epoch, false)
            .unwrap()
            .into_iter()
            .map(|unit| match unit {
                StoredUnit::Group(group) => group.load().unwrap(),
                StoredUnit::Invalid(invalid) => ExecutionUnit::Invalid(invalid),
            })
            .collect()
    }

    /// A queue exercising every grouping rule: variants before and after
    /// their seed, ids with spaces and numbers, concurrency keys of every
    /// kind, and each invalid reason.
    fn every_rule() -> Vec<Value> {
        vec![
            json!({"item_id": "v0", "is_variant": true, "seed_item_id": "s1", "family": "f"}),
            json!({"item_id": " s1 ", "family": "f", "text": "x".repeat(200)}),
            json!({"item_id": "v1", "is_variant": true, "seed_item_id": "s1",
                   "concurrency_keys": [" a ", null, "", 7, "a"], "family": "f"}),
            json!({"item_id": 5, "family": "g", "concurrency_key": "ck"}),
            json!({"item_id": "v2", "is_variant": true, "seed_item_id": "5"}),
            json!({"item_id": "", "family": "h"}),
            json!({"item_id": "dup", "family": "d"}),
            json!({"item_id": "dup", "family": "d"}),
            json!({"item_id": "vd", "is_variant": true, "seed_item_id": "dup"}),
            json!({"item_id": "s1", "is_variant": true, "seed_item_id": "5"}),
            json!({"item_id": "v1", "is_variant": true, "seed_item_id": "5"}),
            json!({"item_id": " v9", "is_variant": true, "seed_item_id": "nowhere"}),
            json!({"item_id": null, "is_variant": true}),
            json!({"item_id": "lone", "nested": {"a": [1, {"b": 2}]}}),
        ]
    }

    #[test]
    fn stored_units_equal_the_held_units_of_the_same_items() {
        let lines = every_rule();
        let f = file(&lines);
        let stored = load_items_file(f.path()).unwrap();
        assert_eq!(stored.len(), lines.len());
        let expected = build_episode_execution_units(held(&lines), "main", 4);
        assert!(
            expected
                .iter()
                .any(|unit| matches!(unit, ExecutionUnit::Invalid(_))),
            "the queue exercises invalid items"
        );
        assert_eq!(loaded_units(stored, 4), expected);
    }

    #[test]
    fn the_fatal_preflight_names_the_lowest_invalid_item() {
        let lines = every_rule();
        let f = file(&lines);
        let stored = Arc::new(load_items_file(f.path()).unwrap());
        let Err(StoredUnitsError::Invalid(error)) = stored.units("main", 1, true) else {
            panic!("a queue with invalid items is refused");
        };
        let expected = crate::episode::units::fatal_preflight(&held(&lines)).unwrap_err();
        assert_eq!(error.message, expected.message);
        assert_eq!(error.error_type, ErrorType::InvalidItem);
    }

    /// Each stored item's identity, as a lane reads it back, next to the
    /// one read from its map; and whether the store kept it. The text a
    /// lane sends is checked on the way: the one an item parsed from its
    /// line sends (the line, or its map when it repeats an identity field).
    fn identities(lines: &[String]) -> Vec<(ItemIdentity, ItemIdentity, bool)> {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        for line in lines {
            writeln!(f, "{line}").unwrap();
        }
        let stored = load_items_file(f.path()).unwrap();
        lines
            .iter()
            .enumerate()
            .map(|(index, line)| {
                let map: serde_json::Map<String, Value> = serde_json::from_str(line).unwrap();
                let read = stored.read(index).unwrap();
                let parsed = Item::from_json_text(line).unwrap();
                assert_eq!(read.json_text(), parsed.json_text(), "{line}");
                (
                    read.identity().into_owned(),
                    ItemIdentity::of(&map),
                    stored.entries[index].has_identity(),
                )
            })
            .collect()
    }

    #[test]
    fn an_identity_kept_from_the_scan_is_the_one_read_from_the_map() {
        let kept = [
            r#"{"item_id":"s0","family":"f0","text":"seed"}"#,
            r#"{"item_id":"s0~v0","family":"f0","is_variant":true,"seed_item_id":"s0","variant_spec":{"spec_id":"v0"}}"#,
            r#"{"item_id":"s0~v1","family":"f0","is_variant":true,"seed_item_id":"s0","variant_spec":{"x":1}}"#,
            r#"{"item_id":"s0~v2","is_variant":true,"seed_item_id":"s0","variant_spec":{"spec_id":null}}"#,
            r#"{"item_id":"s0~v3","family":null,"is_variant":true,"seed_item_id":"s0","variant_spec":[1]}"#,
            r#"{"item_id":"s1","family":"f0","variant_spec":{"spec_id":"ignored"}}"#,
            r#"{"item_id":"s2","family":"g","variant_spec":{"spec_id":1,"spec_id":"last"},"is_variant":true,"seed_item_id":"s1"}"#,
        ];
        let parsed = [
            r#"{"item_id":" s3 ","family":"f"}"#,
            r#"{"item_id":4,"family":"f"}"#,
            r#"{"item_id":"s5","family":["f"]}"#,
            r#"{"item_id":"s6~v","family":"f","is_variant":true,"seed_item_id":"s6","variant_spec":{"spec_id":7}}"#,
            // An item naming an identity field twice is sent as its map.
            r#"{"item_id":"s7","item_id":"s8","family":"f"}"#,
            r#"{"item_id":"s9","family":"f","family":"g"}"#,
            r#"{"item_id":"s2~v","variant_spec":{"spec_id":"a"},"variant_spec":{"spec_id":"w"},"is_variant":true,"seed_item_id":"s2"}"#,
            r#"{"item_id":"s10","is_variant":false,"is_variant":null}"#,
        ];
        let lines: Vec<String> = kept.iter().chain(&parsed).map(|l| l.to_string()).collect();
        for (index, (read_back, expected, is_kept)) in identities(&lines).into_iter().enumerate() {
            assert_eq!(read_back, expected, "{}", lines[index]);
            assert_eq!(is_kept, index < kept.len(), "{}", lines[index]);
        }
    }

    use proptest::strategy::Strategy;

    proptest::proptest! {
        #![proptest_config(crate::hostile_inputs::config(128))]

        /// Whatever an item's identity fields hold, the identity a lane
        /// reads back is the one its map gives.
        #[test]
        fn prop_a_stored_identity_is_the_one_read_from_the_map(
            fields in proptest::collection::vec(
                (
                    proptest::sample::select(vec![
                        "item_id", "family", "is_variant", "variant_spec", "x",
                    ]),
                    crate::hostile_inputs::json_value(),
                ),
                0..5,
            ),
            family in proptest::option::of(proptest::prop_oneof![
                "[a-z ]{0,3}".prop_map(Value::from),
                crate::hostile_inputs::json_value(),
            ]),
            spec_id in proptest::option::of(proptest::prop_oneof![
                "[a-z ]{0,3}".prop_map(Value::from),
                crate::hostile_inputs::json_value(),
            ]),
            variant in proptest::prelude::any::<bool>(),
            id in "[a-z ]{1,4}",
        ) {
            // Keys may repeat (the last one counts): random fields first,
            // then, as often as not, a family and a variant's fields.
            let mut line = format!(r#"{{"item_id":{}"#, json!(id));
            let mut push = |key: &str, value: &Value| {
                line.push_str(&format!(",{}:{value}", json!(key)));
            };
            for (key, value) in &fields {
                match (*key, value) {
                    ("item_id", Value::Bool(_)) => push(key, &json!(id)),
                    _ => push(key, value),
                }
            }
            if let Some(family) = &family {
                push("family", family);
            }
            if variant {
                push("is_variant", &json!(true));
                push("seed_item_id", &json!("s"));
                let spec = match &spec_id {
                    Some(spec_id) => json!({"x": 1, "spec_id": spec_id}),
                    None => json!({"x": 1}),
                };
                push("variant_spec", &spec);
            }
            line.push('}');
            let Ok(_) = crate::harness::item_line::check_line(&line) else {
                return Ok(()); // refused by the items file's type rules
            };
            for (read_back, expected, _) in identities(&[line.clone()]) {
                proptest::prop_assert_eq!(read_back, expected, "{}", line);
            }
        }
    }

    #[test]
    fn items_far_apart_in_the_file_are_read_one_by_one() {
        let mut lines = vec![json!({"item_id": "s", "family": "f"})];
        lines.extend(
            (0..50).map(|n| json!({"item_id": format!("other{n}"), "pad": "p".repeat(200)})),
        );
        lines.push(json!({"item_id": "v", "is_variant": true, "seed_item_id": "s"}));
        let f = file(&lines);
        let units = loaded_units(load_items_file(f.path()).unwrap(), 1);
        let ExecutionUnit::Group(group) = &units[0] else {
            panic!("a group first")
        };
        assert_eq!(group.items, held(&[lines[0].clone(), lines[51].clone()]));
    }

    #[test]
    fn a_file_changed_under_the_run_is_an_error_naming_the_item() {
        let lines = vec![
            json!({"item_id": "s", "family": "f"}),
            json!({"item_id": "v", "is_variant": true, "seed_item_id": "s"}),
        ];
        let f = file(&lines);
        let stored = Arc::new(load_items_file(f.path()).unwrap());
        let units = stored.units("main", 1, false).unwrap();
        // The same length, other bytes: only the hash can tell.
        let changed = std::fs::read_to_string(f.path())
            .unwrap()
            .replace("\"v\"", "\"w\"");
        std::fs::write(f.path(), changed).unwrap();
        let StoredUnit::Group(group) = &units[0] else {
            panic!("a group")
        };
        let error = group.load().unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        let expected = format!(
            "{}: the items file changed while the run was using it (the item at byte {}",
            f.path().display(),
            std::fs::read_to_string(f.path())
                .unwrap()
                .find("{\"is_variant")
                .unwrap()
        );
        assert!(error.to_string().starts_with(&expected), "{error}");
    }
}
