//! Replays the fuzz regression corpus (`fuzz/corpus/batch_decode`) through the same
//! workout the fuzz target runs, so every input ever found stays harmless.

#[test]
fn fuzz_corpus_replays_without_panic() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/batch_decode");
    let mut files = 0;
    let mut records = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        records += weir_record::fuzzing::exercise_decoder(&data, 1 << 20);
        files += 1;
    }
    assert!(files >= 20, "the corpus has {files} files");
    assert!(records > 0, "the seed files hold valid records");
}
