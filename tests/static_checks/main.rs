//! Checks of the repository's text, without running the server (issue 28 point 6: one test
//! program per concern, each module once a program of its own): the layers of src/ and the
//! links of the documentation.

mod docs_links;
mod layers;
