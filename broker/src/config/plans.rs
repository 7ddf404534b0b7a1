//! Which limits apply: a token's plan claim, the account's plan, the
//! default plan, and the account's overrides over it.

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
