import { useEffect, useId, useRef, useState, type ReactNode } from 'react';

interface Props {
  open: boolean;
  title: string;
  children?: ReactNode;
  confirmLabel: string;
  danger?: boolean;
  /** Show a "reason" text box; its value is passed to onConfirm. */
  askReason?: boolean;
  busy?: boolean;
  onConfirm: (reason: string) => void;
  onCancel: () => void;
}

/** A modal <dialog>: focus is trapped by the browser, Escape cancels. */
export function ConfirmDialog(p: Props) {
  const ref = useRef<HTMLDialogElement>(null);
  const [reason, setReason] = useState('');
  const id = useId();
  useEffect(() => {
    const d = ref.current;
    if (!d) return;
    if (p.open && !d.open) {
      setReason('');
      d.showModal();
    } else if (!p.open && d.open) d.close();
  }, [p.open]);
  return (
    <dialog
      ref={ref}
      className="dialog"
      aria-labelledby={`${id}-title`}
      data-testid="confirm-dialog"
      onCancel={(e) => {
        e.preventDefault();
        p.onCancel();
      }}
    >
      <form
        method="dialog"
        onSubmit={(e) => {
          e.preventDefault();
          p.onConfirm(reason);
        }}
      >
        <h2 id={`${id}-title`}>{p.title}</h2>
        {p.children}
        {p.askReason && (
          <label className="field">
            <span>Reason (recorded in the job&apos;s events)</span>
            <input
              value={reason}
              maxLength={1024}
              onChange={(e) => setReason(e.target.value)}
              data-testid="confirm-reason"
            />
          </label>
        )}
        <div className="dialog-actions">
          <button type="button" onClick={p.onCancel} data-testid="confirm-no">
            Keep
          </button>
          <button
            type="submit"
            className={p.danger ? 'danger' : 'primary'}
            disabled={p.busy}
            data-testid="confirm-yes"
          >
            {p.busy ? 'Working…' : p.confirmLabel}
          </button>
        </div>
      </form>
    </dialog>
  );
}
