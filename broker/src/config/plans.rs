//! Which limits apply: a token's plan claim, the account's plan, the
//! default plan, and the account's overrides over it.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Config, Limits, UnknownPlan, limits_from, merge};

impl Config {
    /// The limits in force for `account` with the token's `plan` claim:
    /// plan = claim, else the account's plan, else `auth.default_plan`;
    /// then the account's overrides on top.
    pub fn limits_for(
        &self,
        account: &str,
        claim: Option<&str>,
    ) -> Result<Arc<Limits>, UnknownPlan> {
        let entry = self.accounts.get(account);
        let plan = claim
            .or_else(|| entry.and_then(|e| e.plan.as_deref()))
            .unwrap_or(&self.auth.default_plan);
        let base = self
            .plans
            .get(plan)
            .ok_or_else(|| UnknownPlan(plan.to_owned()))?;
        let Some(entry) = entry.filter(|e| !e.overrides.is_empty()) else {
            return Ok(base.clone());
        };
        let key = (account.to_owned(), plan.to_owned());
        if let Some(hit) = self.resolved.get(&key) {
            return Ok(hit.clone());
        }
        let merged = merge(self.plan_tables[plan].clone(), &entry.overrides);
        // Validated at load for every plan, so this cannot fail; fall back to
        // the plan rather than panic if it somehow does.
        let limits = limits_from(&merged, "", &mut Vec::new())
            .map(Arc::new)
            .unwrap_or_else(|| base.clone());
        self.resolved.insert(key, limits.clone());
        Ok(limits)
    }

    /// The plan `limits_for` resolves for `account` with the token's
    /// `claim` (the default plan when the account's is unknown).
    pub fn plan_name<'a>(&'a self, account: &str, claim: Option<&'a str>) -> &'a str {
        let plan = claim
            .or_else(|| self.accounts.get(account).and_then(|e| e.plan.as_deref()))
            .unwrap_or(&self.auth.default_plan);
        if self.plans.contains_key(plan) {
            plan
        } else {
            &self.auth.default_plan
        }
    }

    /// Limits of an account's own plan (no token claim): what HTTP publish
    /// keys of that account get.
    pub fn account_limits(&self, account: &str) -> Arc<Limits> {
        self.limits_for(account, None)
            .unwrap_or_else(|_| self.plans[&self.auth.default_plan].clone())
    }

    pub fn plan_names(&self) -> impl Iterator<Item = &str> {
        self.plans.keys().map(String::as_str)
    }
}

/// A warning for each plan whose `max_subscriptions` is above what an SSE
/// stream's position holds in its 4 KiB (`position::MAX_CHANNELS`, 510):
/// that plan's sockets keep the cap, but its SSE streams are capped at
/// 510 channels (more is 400 `bad_request`, after the cap's own check).
/// Sorted by plan name, so the warnings read the same on every load.
pub(super) fn sse_cap_warnings(plans: &HashMap<String, Arc<Limits>>, warnings: &mut Vec<String>) {
    let max = crate::protocol::position::MAX_CHANNELS;
    let mut over: Vec<(&String, u32)> = plans
        .iter()
        .map(|(name, l)| (name, l.max_subscriptions))
        .filter(|(_, m)| *m as usize > max)
        .collect();
    over.sort();
    for (name, m) in over {
        warnings.push(format!(
            "plans.{name}.max_subscriptions is {m}: an SSE stream's position holds at most {max} channels, so that plan's SSE streams are capped at {max} (a stream of more is refused 400 bad_request); WebSockets keep {m}"
        ));
    }
}
