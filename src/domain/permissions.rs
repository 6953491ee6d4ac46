//! Permissions and sets of them: the 19 of the inbox (inbox.md §2.7), and the scheduler's,
//! named after its endpoints (issue 11: scheduler access keys work like the inbox's). Both
//! services share one enum: names that mean the same on both (`PermitGetAccountInfo`,
//! `PermitSync`, the access-key and admin permissions, …) are one permission; each service
//! has its own table ([`Service::table`]) that gives the names it accepts and their order.

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
    // the scheduler's own (after the inbox's 19, whose bits are stored in tokens and keys)
    PermitAddItem,
    PermitEditItem,
    PermitDeleteItem,
    PermitRetry,
    PermitDeleteTriggereds,
    PermitGetSettings,
    PermitPutSettings,
    PermitGetTriggers,
    PermitAddTrigger,
    PermitVerifyTrigger,
    PermitResendVerification,
    PermitDeleteTrigger,
);

/// The scheduler's permissions in the order of its table: items, settings, triggers, the
/// account, access keys, then the admin's.
pub const SCHEDULER_TABLE: &[Permission] = &[
    Permission::PermitAddItem,
    Permission::PermitGetItem,
    Permission::PermitEditItem,
    Permission::PermitDeleteItem,
    Permission::PermitGetItems,
    Permission::PermitGetItemUUIDs,
    Permission::PermitRetry,
    Permission::PermitDeleteTriggereds,
    Permission::PermitSync,
    Permission::PermitGetSettings,
    Permission::PermitPutSettings,
    Permission::PermitGetTriggers,
    Permission::PermitAddTrigger,
    Permission::PermitVerifyTrigger,
    Permission::PermitResendVerification,
    Permission::PermitDeleteTrigger,
    Permission::PermitDeleteAccount,
    Permission::PermitGetAccountInfo,
    Permission::PermitPostChangePassphrase,
    Permission::PermitPostAddAccessKey,
    Permission::PermitGetAccessKey,
    Permission::PermitGetAccessKeys,
    Permission::PermitDeleteAccessKey,
    Permission::PermitGetPermissions,
    Permission::PermitAdminDeleteAccount,
    Permission::PermitAdminGetAccounts,
    Permission::PermitAdminGetStats,
];

/// Who may call a route of a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Public,
    /// Public while the server takes registrations (`POST /register`); refused with 403
    /// from the headers otherwise, before the body is read.
    Registration,
    /// Credentials that carry the permission.
    Needs(Permission),
    /// The permission, and the caller's username is an admin's.
    Admin(Permission),
}

impl Access {
    /// The access, and the permissions of what the route's handler also reads or writes
    /// (an export reads the access keys too): `Needs(PermitGetItems).and(&[...])`.
    pub const fn and(self, also_needs: &'static [Permission]) -> Guard {
        Guard {
            access: self,
            also_needs,
        }
    }
}

/// What a route asks of its caller: its [`Access`], and the permissions of what its
/// handler also reads or writes, all checked from the headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guard {
    pub access: Access,
    pub also_needs: &'static [Permission],
}

impl From<Access> for Guard {
    fn from(access: Access) -> Guard {
        access.and(&[])
    }
}

/// How many of a table's permissions (at its end) are the admin's.
const ADMIN_PERMISSIONS: usize = 3;

/// The permission table of a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    Inbox,
    Scheduler,
}

impl Table {
    /// Its permissions in order.
    pub fn all(self) -> &'static [Permission] {
        match self {
            Table::Inbox => &Permission::ALL[..19],
            Table::Scheduler => SCHEDULER_TABLE,
        }
    }

    /// What a password login of an ordinary user gets: all but the admin's.
    pub fn user(self) -> Permissions {
        let all = self.all();
        Permissions::of(&all[..all.len() - ADMIN_PERMISSIONS])
    }

    /// What a password login of an admin gets.
    pub fn admin(self) -> Permissions {
        Permissions::of(self.all())
    }

    /// The names of `set` in this table's order.
    pub fn names(self, set: Permissions) -> Vec<&'static str> {
        self.all()
            .iter()
            .filter(|p| set.contains(**p))
            .map(|p| p.name())
            .collect()
    }

    /// Parses a list of names of this table; `Err(name)` for the first unknown one.
    pub fn parse<'a>(self, names: impl IntoIterator<Item = &'a str>) -> Result<Permissions, String> {
        let mut set = Permissions::default();
        for n in names {
            let p = Permission::parse(n)
                .filter(|p| self.all().contains(p))
                .ok_or_else(|| n.to_owned())?;
            set.insert(p);
        }
        Ok(set)
    }
}

/// A set of permissions (bit i = permission i of the table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Permissions(pub u32);

impl Permissions {
    pub fn of(list: &[Permission]) -> Permissions {
        let mut set = Permissions::default();
        for p in list {
            set.insert(*p);
        }
        set
    }

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

    /// Every permission in the set, of any table.
    pub fn iter_all(self) -> impl Iterator<Item = Permission> {
        Permission::ALL.iter().copied().filter(move |p| self.contains(*p))
    }

    pub fn is_subset_of(self, other: Permissions) -> bool {
        self.0 & !other.0 == 0
    }

    /// The inbox permissions in table order.
    pub fn iter(self) -> impl Iterator<Item = Permission> {
        Table::Inbox.all().iter().copied().filter(move |p| self.contains(*p))
    }

    /// The names of the inbox permissions in table order.
    pub fn names(self) -> Vec<&'static str> {
        Table::Inbox.names(self)
    }

    /// Parses a list of inbox permission names; `Err(name)` for the first unknown one.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Permissions, String> {
        Table::Inbox.parse(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_service_has_its_own_table() {
        assert_eq!(Table::Inbox.user(), Permissions::USER);
        assert_eq!(Table::Inbox.admin(), Permissions::ADMIN);
        assert_eq!(Table::Scheduler.all().len(), 27);
        assert_eq!(Table::Scheduler.user().iter_all().count(), 24);
        assert_eq!(Table::Scheduler.names(Table::Scheduler.user())[0], "PermitAddItem");
        // a name of the other service is not a permission here
        assert!(Table::Inbox.parse(["PermitAddItem"]).is_err());
        assert!(Table::Scheduler.parse(["PermitAdd"]).is_err());
        let shared = Table::Scheduler.parse(["PermitSync", "PermitAddItem"]).unwrap();
        assert_eq!(Table::Scheduler.names(shared), ["PermitAddItem", "PermitSync"]);
        assert!(Permission::ALL.len() <= 32, "a set is 32 bits");
    }

    #[test]
    fn nineteen_in_table_order() {
        assert_eq!(Table::Inbox.all().len(), 19);
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
