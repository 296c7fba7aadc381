//! (being written: the git index editor of the in-process import; see the helper's task)
