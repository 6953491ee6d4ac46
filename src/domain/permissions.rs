//! The 19 permissions of inbox.md §2.7 and sets of them.

use serde::{Deserialize, Serialize};

macro_rules! permissions {
    ($($name:ident),* $(,)?) => {
        /// One permission; the discriminant is its position in the table of inbox.md §2.7.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Permission { $($name),* }

        impl Permission {
            pub const ALL: &'static [Permission] = &[$(Permission::$name),*];

            pub fn name(self) -> &'static str {
                match self { $(Permission::$name => stringify!($name)),* }
            }

            pub fn parse(s: &str) -> Option<Permission> {
                match s { $(stringify!($name) => Some(Permission::$name),)* _ => None }
            }
        }
    };
}

permissions!(
    PermitAdd,
    PermitShow,
    PermitSize,
    PermitDelete,
    PermitGetItem,
    PermitGetItems,
    PermitGetItemUUIDs,
    PermitSync,
    PermitDeleteAccount,
    PermitGetAccountInfo,
    PermitPostChangePassphrase,
    PermitPostAddAccessKey,
    PermitGetAccessKey,
    PermitGetAccessKeys,
    PermitDeleteAccessKey,
    PermitGetPermissions,
    PermitAdminDeleteAccount,
    PermitAdminGetAccounts,
    PermitAdminGetStats,
);

/// A set of permissions (bit i = permission i of the table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Permissions(pub u32);

impl Permissions {
    /// Permissions 1–16: what a password login of an ordinary user gets.
    pub const USER: Permissions = Permissions((1 << 16) - 1);
    /// All 19: what a password login of an admin gets.
    pub const ADMIN: Permissions = Permissions((1 << 19) - 1);

    pub fn contains(self, p: Permission) -> bool {
        self.0 & (1 << p as u32) != 0
    }

    pub fn insert(&mut self, p: Permission) {
        self.0 |= 1 << p as u32;
    }

    pub fn is_subset_of(self, other: Permissions) -> bool {
        self.0 & !other.0 == 0
    }

    /// The permissions in table order.
    pub fn iter(self) -> impl Iterator<Item = Permission> {
        Permission::ALL.iter().copied().filter(move |p| self.contains(*p))
    }

    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(Permission::name).collect()
    }

    /// Parses a list of names; `Err(name)` for the first unknown one.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Permissions, String> {
        let mut set = Permissions::default();
        for n in names {
            set.insert(Permission::parse(n).ok_or_else(|| n.to_owned())?);
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nineteen_in_table_order() {
        assert_eq!(Permission::ALL.len(), 19);
        assert_eq!(Permissions::USER.names().len(), 16);
        assert_eq!(Permissions::USER.names()[15], "PermitGetPermissions");
        assert_eq!(Permissions::ADMIN.names()[18], "PermitAdminGetStats");
    }

    #[test]
    fn parse_sorts_and_dedups() {
        let p = Permissions::parse(["PermitSize", "PermitAdd", "PermitSize"]).unwrap();
        assert_eq!(p.names(), ["PermitAdd", "PermitSize"]);
        assert_eq!(Permissions::parse(["permitadd"]), Err("permitadd".to_string()));
    }

    #[test]
    fn subset_rule() {
        let small = Permissions::parse(["PermitAdd"]).unwrap();
        assert!(small.is_subset_of(Permissions::USER));
        let admin_only = Permissions::parse(["PermitAdminGetStats"]).unwrap();
        assert!(!admin_only.is_subset_of(Permissions::USER));
        assert!(Permissions::default().is_subset_of(small));
    }
}
