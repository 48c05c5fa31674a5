//! Native test doubles for the harness: a scripted [`SeedSource`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::episode::adapter::{AdapterError, Item, SeedSource};
use crate::episode::testing::item_id;

/// Seeds per epoch and scripted variant compilation, with a call log.
pub(crate) struct ScriptedSeeds {
    /// Seeds of epoch `n` at index `n - 1`; later epochs repeat the last
    /// entry (an empty entry ends the arm with `seed_queue_empty`).
    pub epochs: Vec<Vec<Item>>,
    /// `compile_variant` errors by spec id.
    pub compile_errors: HashMap<String, AdapterError>,
    /// `list_seed_items` error.
    pub list_error: Option<AdapterError>,
    /// `list_seed_items:{epoch}` and `compile:{spec_id}@{seed_id}`.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl ScriptedSeeds {
    pub fn new(epochs: Vec<Vec<Item>>) -> Self {
        Self {
            epochs,
            compile_errors: HashMap::new(),
            list_error: None,
            log: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub fn calls(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn compiled(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|c| c.starts_with("compile:"))
            .collect()
    }
}

impl SeedSource for ScriptedSeeds {
    fn list_seed_items(&mut self, _arm: &str, epoch: u32) -> Result<Vec<Item>, AdapterError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("list_seed_items:{epoch}"));
        if let Some(error) = &self.list_error {
            return Err(error.clone());
        }
        let index = (epoch as usize - 1).min(self.epochs.len().saturating_sub(1));
        Ok(self.epochs.get(index).cloned().unwrap_or_default())
    }

    /// Compiles to `{item_id: "{seed}~{spec}", text}`, merged with the
    /// spec's `compiled` object when present (lets a test shape the item).
    fn compile_variant(&mut self, spec: &Item, seed: &Item) -> Result<Item, AdapterError> {
        let spec_id = item_id_of_spec(spec);
        self.log
            .lock()
            .unwrap()
            .push(format!("compile:{spec_id}@{}", item_id(seed)));
        if let Some(error) = self.compile_errors.get(&spec_id) {
            return Err(error.clone());
        }
        let mut item: Item = crate::episode::testing::obj(json!({
            "item_id": format!("{}~{spec_id}", item_id(seed)),
            "text": "compiled",
        }));
        if let Some(Value::Object(extra)) = spec.get("compiled") {
            for (key, value) in extra {
                item.insert(key.clone(), value.clone());
            }
        }
        Ok(item)
    }
}

fn item_id_of_spec(spec: &Item) -> String {
    match spec.get("spec_id") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// A catalog spec `{spec_id, seed_family, intent, priority}`.
pub(crate) fn spec(id: &str, family: &str, priority: f64) -> Item {
    crate::episode::testing::obj(json!({
        "spec_id": id, "seed_family": family, "intent": format!("try {id}"),
        "priority": priority, "ops": []
    }))
}
